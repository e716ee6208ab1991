"""Installing models against a loopback HTTP server (127.0.0.1, started by each test): resume,
checksums, refused zips, offline, kill -9, packs without a network, licences, verify, proxies."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from catalogue_fixtures import LICENSED_ID, MODEL_ID, ZIP_NAME
from loopback_server import LoopbackServer

from medseg.catalogue.folders import find_installed, installed_model_path
from medseg.catalogue.install import import_path, install, remove, verify
from medseg.catalogue.packs import install_pack, pack
from medseg.cli import main as cli_main
from medseg.errors import ChecksumMismatch, DownloadError, LicenceNotAccepted, OfflineError, UnsafeModelError
from medseg.workflows.models import open_model

REPO = Path(__file__).resolve().parents[2]


def models_root() -> Path:
    return Path(os.environ["MEDSEG_MODELS"])


def nothing_installed(model_id: str = MODEL_ID) -> bool:
    folder = models_root().joinpath(*model_id.split("/"))
    versions = [p for p in folder.iterdir() if p.name.startswith("v-")] if folder.is_dir() else []
    return find_installed(model_id) is None and not versions


def test_install_converts_and_opens_by_id(catalogue_file, server, model_zip):
    catalogue_file()
    seen = []
    record = install(MODEL_ID, progress=seen.append)
    path = installed_model_path(MODEL_ID)
    package = open_model(path).package
    assert package.name == MODEL_ID and package.names == {0: "background", 1: "liver", 2: "spleen"}
    assert list(package.configurations) == ["3mm"]
    assert record.sources[0]["sha256"] == hashlib.sha256(model_zip).hexdigest()
    assert not any(name.endswith(".pth") for name in record.files)  # converted: no pickle stays
    assert all(v.ok for v in verify(MODEL_ID))
    assert seen[-1].fraction == 1.0 and any(p.stage == "download" for p in seen)
    assert server.ranges(f"/{ZIP_NAME}") == [None]


def test_interrupted_download_resumes_with_range(catalogue_file, server, model_zip):
    catalogue_file()
    half = len(model_zip) // 2
    server.cut_after[f"/{ZIP_NAME}"] = half
    with pytest.raises(DownloadError, match="stopped after"):
        install(MODEL_ID)
    assert nothing_installed()
    record = install(MODEL_ID)
    assert server.ranges(f"/{ZIP_NAME}") == [None, f"bytes={half}-"]
    assert record.sources[0]["sha256"] == hashlib.sha256(model_zip).hexdigest()
    assert open_model(installed_model_path(MODEL_ID)).package.name == MODEL_ID


def test_a_server_without_range_support_gives_the_whole_file_again(catalogue_file, server, model_zip):
    catalogue_file()
    server.cut_after[f"/{ZIP_NAME}"] = len(model_zip) // 2
    with pytest.raises(DownloadError):
        install(MODEL_ID)
    server.ranges_supported = False
    record = install(MODEL_ID)  # asked for the rest, got 200 and the whole file: starts the file again
    assert server.ranges(f"/{ZIP_NAME}")[-1] == f"bytes={len(model_zip) // 2}-"
    assert record.sources[0]["sha256"] == hashlib.sha256(model_zip).hexdigest()
    assert record.sources[0]["size"] == len(model_zip)


def test_checksum_mismatch_is_refused_and_nothing_installed(catalogue_file, model_zip):
    wrong = "0" * 64
    catalogue_file(sha256=wrong)
    with pytest.raises(ChecksumMismatch) as caught:
        install(MODEL_ID)
    text = str(caught.value)
    assert ZIP_NAME in text and wrong in text and hashlib.sha256(model_zip).hexdigest() in text
    assert nothing_installed()
    assert not list((models_root() / ".downloads").glob("*.part"))  # a wrong file is not kept for a resume


def test_no_published_checksum_records_the_hash_and_list_says_so(catalogue_file, model_zip, capsys):
    catalogue_file(sha256=None)
    assert cli_main(["models", "list"]) == 0
    assert "no published checksum" in capsys.readouterr().out
    record = install(MODEL_ID)
    assert record.sources[0]["published_sha256"] is None
    assert record.sources[0]["sha256"] == hashlib.sha256(model_zip).hexdigest()


def bad_zip(member: str, link: bool = False) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("Dataset901_X/ok.txt", "fine")
        info = zipfile.ZipInfo(member)
        if link:
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd" if link else "escaped")
    return buffer.getvalue()


@pytest.mark.parametrize("member, link", [("../escaped.txt", False), ("Dataset901_X/../../escaped.txt", False),
                                          ("/tmp/escaped.txt", False), ("Dataset901_X/link", True)],
                         ids=["dotdot", "nested-dotdot", "absolute", "symlink"])
def test_unsafe_zip_is_refused(catalogue_file, tmp_path, member, link):
    catalogue_file(payload=bad_zip(member, link))
    with pytest.raises(UnsafeModelError, match="refused"):
        install(MODEL_ID)
    assert nothing_installed()
    assert not list(tmp_path.rglob("escaped.txt")) and not Path("/tmp/escaped.txt").exists()


def test_offline_is_a_clear_error(catalogue_file):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    catalogue_file(url=f"http://127.0.0.1:{port}/{ZIP_NAME}")
    with pytest.raises(OfflineError, match="cannot reach 127.0.0.1") as caught:
        install(MODEL_ID)
    assert "pack" in caught.value.hint
    assert nothing_installed()


def test_http_status_is_reported(catalogue_file, server):
    catalogue_file()
    server.status[f"/{ZIP_NAME}"] = 404
    with pytest.raises(DownloadError, match="HTTP 404"):
        install(MODEL_ID)
    assert nothing_installed()


def test_licence_not_accepted_installs_nothing_and_fetches_nothing(catalogue_file, server, capsys):
    catalogue_file()
    with pytest.raises(LicenceNotAccepted, match="Non-commercial use only"):
        install(LICENSED_ID)
    assert server.requests == [] and nothing_installed(LICENSED_ID)
    assert cli_main(["models", "install", LICENSED_ID]) == 1  # not a terminal: no prompt, no acceptance
    assert "needs your acceptance" in capsys.readouterr().err and nothing_installed(LICENSED_ID)
    shown = []
    record = install(LICENSED_ID, accept_licence=lambda entry: shown.append(entry.licence.terms) or True)
    assert shown == ["Non-commercial use only, for the tests."]
    assert record.licence["accepted_at"] and record.licence["terms"] == shown[0]


def test_failed_update_keeps_the_old_version(catalogue_file, server, model_zip):
    catalogue_file()
    old = install(MODEL_ID)
    catalogue_file(sha256="f" * 64, version="2.0")
    with pytest.raises(ChecksumMismatch):
        install(MODEL_ID)
    now = find_installed(MODEL_ID)
    assert now.version == "1.0" and now.active == old.active
    assert open_model(installed_model_path(MODEL_ID)).package.name == MODEL_ID
    catalogue_file(version="2.0")
    new = install(MODEL_ID)
    assert new.version == "2.0" and not (new.folder / old.active).exists()


def test_verify_detects_a_changed_file(catalogue_file, capsys):
    catalogue_file()
    record = install(MODEL_ID)
    weights = record.run_path() / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    (bad,) = verify(MODEL_ID)
    assert bad.changed == ["model/weights.safetensors"] and not bad.ok
    assert cli_main(["models", "verify", MODEL_ID]) == 1
    assert "changed: model/weights.safetensors" in capsys.readouterr().out


def test_pack_installs_without_network(catalogue_file, model_zip, tmp_path, monkeypatch, capsys):
    catalogue_file()
    original = install(MODEL_ID)
    pack_file = tmp_path / "tiny.medsegpack"
    assert cli_main(["models", "pack", MODEL_ID, "-o", str(pack_file)]) == 0
    remove(MODEL_ID)
    assert nothing_installed()
    dead = f"http://127.0.0.1:{_closed_port()}"  # any network use would fail now
    monkeypatch.setenv("http_proxy", dead)
    monkeypatch.setenv("https_proxy", dead)
    capsys.readouterr()
    assert cli_main(["models", "install", str(pack_file)]) == 0
    record = find_installed(MODEL_ID)
    assert record.files == original.files and record.sources[0]["pack"] == pack_file.name
    assert all(v.ok for v in verify(MODEL_ID))
    assert open_model(installed_model_path(MODEL_ID)).package.names[2] == "spleen"


def test_altered_pack_is_refused(catalogue_file, tmp_path):
    catalogue_file()
    install(MODEL_ID)
    pack_file = pack(MODEL_ID, tmp_path / "tiny.medsegpack")
    remove(MODEL_ID)
    altered = tmp_path / "altered.medsegpack"
    with zipfile.ZipFile(pack_file) as source, zipfile.ZipFile(altered, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("model.json"):
                data = data.replace(b'"liver"', b'"lever"')
            out.writestr(info, data)
    with pytest.raises(ChecksumMismatch, match="model/model.json in the pack"):
        install_pack(altered)
    assert nothing_installed()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_proxy_from_the_environment_is_used(catalogue_file, model_zip, monkeypatch):
    with LoopbackServer() as proxy:
        proxy.files[f"/{ZIP_NAME}"] = model_zip
        catalogue_file(url=f"http://models.example.invalid/{ZIP_NAME}")  # resolvable only through the proxy
        monkeypatch.setenv("http_proxy", proxy.url)
        install(MODEL_ID)
        assert [r["proxied"] for r in proxy.requests] == [True]


def test_kill_during_install_then_a_clean_retry(catalogue_file, server, model_zip):
    catalogue_file()
    held = len(model_zip) // 3
    server.hold_after[f"/{ZIP_NAME}"] = held
    child = subprocess.Popen([sys.executable, "-m", "medseg", "models", "install", MODEL_ID], cwd=REPO,
                             env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert server.bytes_sent.wait(120), "the install never started its download"
        parts = models_root() / ".downloads"
        deadline = time.monotonic() + 60
        while not any(p.stat().st_size >= held for p in parts.glob("*.part")):  # the child wrote what it got
            assert time.monotonic() < deadline and child.poll() is None, "no partial download appeared"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
    assert nothing_installed()
    server.release.set()
    record = install(MODEL_ID)
    assert server.ranges(f"/{ZIP_NAME}")[-1] == f"bytes={held}-"
    assert record.sources[0]["sha256"] == hashlib.sha256(model_zip).hexdigest()
    assert all(v.ok for v in verify(MODEL_ID))


def test_import_totalsegmentator_home_registers_catalogue_ids(catalogue_file, weights_copy, monkeypatch, capsys):
    catalogue_file()
    monkeypatch.setenv("TOTALSEG_HOME_DIR", str(weights_copy.parents[1]))
    assert cli_main(["models", "import", "--id", MODEL_ID]) == 0
    assert f"installed {MODEL_ID}" in capsys.readouterr().out
    assert open_model(installed_model_path(MODEL_ID)).package.name == MODEL_ID
    with pytest.raises(LicenceNotAccepted):  # the same network is also the licensed test model
        import_path(weights_copy)
    result = import_path(weights_copy, accept_licence=True)
    assert sorted(r.id for r in result.installed) == [LICENSED_ID, MODEL_ID]


def test_import_zip_and_unknown_network(catalogue_file, model_zip, tmp_path, monkeypatch):
    monkeypatch.setenv("MEDSEG_CATALOGUE", str(REPO / "resources" / "models" / "catalogue.json"))
    archive = tmp_path / ZIP_NAME
    archive.write_bytes(model_zip)
    result = import_path(archive)
    (record,) = result.installed
    assert record.id == "local/Dataset901_MedsegFixture"
    assert open_model(installed_model_path(record.id)).package.names == {0: "background", 1: "liver", 2: "spleen"}


def test_references_resolve_to_installed_models(catalogue_file, tmp_path, monkeypatch):
    from medseg.catalogue import resolve_reference
    from medseg.errors import ModelError
    from medseg.model.package import starter_model_path

    monkeypatch.setenv("MEDSEG_CATALOGUE", str(REPO / "resources" / "models" / "catalogue.json"))
    assert resolve_reference("medseg/starter") == starter_model_path()
    catalogue_file()
    assert resolve_reference(str(tmp_path)) is None  # a path stays a path
    assert resolve_reference("starter") is None
    with pytest.raises(ModelError, match="not installed") as caught:
        resolve_reference(MODEL_ID)
    assert f"medseg models install {MODEL_ID}" in caught.value.hint
    with pytest.raises(ModelError, match="no model 'test/nope' in the catalogue"):
        resolve_reference("test/nope")
    install(MODEL_ID)
    assert resolve_reference(MODEL_ID) == installed_model_path(MODEL_ID)


def test_disk_full_is_said_before_downloading(catalogue_file, server, monkeypatch):
    from collections import namedtuple

    from medseg.catalogue import download as download_module
    from medseg.errors import ResourceLimitError

    catalogue_file()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(download_module.shutil, "disk_usage", lambda path: usage(1 << 30, (1 << 30) - 4096, 4096))
    with pytest.raises(ResourceLimitError, match="the disk is full") as caught:
        install(MODEL_ID)
    assert "MEDSEG_MODELS" in caught.value.hint
    assert nothing_installed()


def test_system_wide_models_are_found_read_only_and_a_users_install_wins(catalogue_file, tmp_path, monkeypatch):
    from medseg.errors import ModelError

    catalogue_file()
    system = tmp_path / "system-models"
    monkeypatch.setenv("MEDSEG_MODELS", str(system))  # IT installs into the shared folder...
    it_record = install(MODEL_ID)
    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "user-models"))  # ...which users see read-only
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", str(system))
    found = find_installed(MODEL_ID)
    assert found.read_only and found.folder == it_record.folder
    assert installed_model_path(MODEL_ID) == it_record.run_path()
    with pytest.raises(ModelError, match="installed for every user by your IT"):
        remove(MODEL_ID)
    mine = install(MODEL_ID)
    assert find_installed(MODEL_ID).folder == mine.folder and not find_installed(MODEL_ID).read_only
    assert installed_model_path(MODEL_ID) == mine.run_path()


def test_segment_opens_a_catalogue_id(catalogue_file, ct_dir, tmp_path, capsys):
    import json as json_module

    import SimpleITK as sitk

    catalogue_file()
    image = sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"))[20:60, 20:60, 0:16]
    source = tmp_path / "ct.nii.gz"
    sitk.WriteImage(image, str(source))
    output = tmp_path / "labels.nii.gz"
    assert cli_main(["segment", str(source), "--model", MODEL_ID, "-o", str(output), "--device", "cpu"]) == 1
    assert f"model {MODEL_ID} is not installed" in capsys.readouterr().err and not output.exists()
    install(MODEL_ID)
    assert cli_main(["segment", str(source), "--model", MODEL_ID, "-o", str(output), "--device", "cpu", "--json"]) == 0
    done = json_module.loads(capsys.readouterr().out.splitlines()[-1])
    assert done["event"] == "done" and done["model"] == MODEL_ID, done
    assert sitk.ReadImage(str(output)).GetSize() == image.GetSize()


def test_a_zip_bomb_is_refused_before_unpacking(catalogue_file, tmp_path):
    from medseg.errors import ResourceLimitError

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("Dataset901_X/fold_0/checkpoint_final.pth", bytes(8 << 20))  # 8 MiB of zeros: ~8 KiB
    catalogue_file(payload=buffer.getvalue())
    with pytest.raises(ResourceLimitError, match="zip bomb"):
        install(MODEL_ID)
    assert nothing_installed() and not list(models_root().rglob("checkpoint_final.pth"))


def test_an_installed_model_opens_by_its_id_with_its_catalogue_card(catalogue_file, server, model_zip):
    """Every interface opens models through medseg.workflows.models.open_model: a catalogue id is the
    folder the catalogue installed, and the card names the id and the catalogue's licence."""
    from medseg.catalogue import load_catalogue
    from medseg.workflows.models import model_path

    catalogue_file()
    install(MODEL_ID)
    assert model_path(MODEL_ID) == installed_model_path(MODEL_ID)
    card = open_model(MODEL_ID).card
    assert card.id == MODEL_ID and card.source == installed_model_path(MODEL_ID)
    assert card.licence == load_catalogue().get(MODEL_ID).licence.summary and card.licence.startswith("Apache-2.0")
    assert {v: label.name for v, label in card.labels.items()} == {1: "liver", 2: "spleen"}
