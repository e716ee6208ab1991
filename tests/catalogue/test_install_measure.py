"""Issue #51: the CPU engine measurement happens when a model is installed (a progress line) and again on
``medseg models verify --measure``, so that the first Segment runs the chosen engine at once.

The oracle for "the record is the installed model's": the store is keyed by the digest of the model opened
from its installed folder and by this machine's description, both read here independently of the install."""

from __future__ import annotations

import json
import sys
from datetime import date
from pathlib import Path

import pytest
from catalogue_fixtures import MODEL_ID

from medseg.catalogue.folders import installed_model_path
from medseg.catalogue.install import install
from medseg.cli import main
from medseg.model import cpu_runtime
from medseg.workflows.models import open_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))  # infer_fixtures
from infer_fixtures import ABDOMEN, crop_volume


@pytest.fixture
def measuring(monkeypatch, tmp_path, fake_machine):
    """No pinned engine (the suite pins PyTorch), two CPU engines, a cache folder of this test's own."""
    fake_machine(cuda=0, providers=("CPUExecutionProvider",), openvino=False)
    monkeypatch.delenv(cpu_runtime.PIN_VARIABLE, raising=False)
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / cpu_runtime.STORE_NAME


def _record_of(package, store: Path) -> tuple[str, dict]:
    """The store's record of this model on this machine (whatever its thread count), found by the model's digest."""
    digest = cpu_runtime.model_digest(package, "3mm")
    (found,) = [(key, r) for key, r in json.loads(store.read_text()).items() if r["model"] == digest]
    return found


def test_an_install_measures_the_engines_and_the_first_segment_uses_the_choice(catalogue_file, measuring, ct_dir,
                                                                                monkeypatch):
    catalogue_file()
    seen = []
    install(MODEL_ID, progress=seen.append)
    lines = [p.text for p in seen if p.stage in ("engine", "engine chosen")]
    assert lines[0].startswith("measuring the CPU engines on ") and "once on this computer" in lines[0]
    assert lines[-1].startswith(f"{MODEL_ID} (3mm): CPU engine ") and "measured on" in lines[-1]
    assert seen[-1].fraction == 1.0
    package = open_model(installed_model_path(MODEL_ID)).package
    _key, record = _record_of(package, measuring)
    assert record["measured"] and set(record["seconds"]) == {"cpu", "onnx-cpu"}
    assert record["measured_on"] == date.today().isoformat()
    assert record["machine"] == cpu_runtime.machine(record["threads"])
    # the first Segment measures nothing: it runs the stored choice at once
    monkeypatch.setattr(cpu_runtime, "measure", lambda *a, **k: pytest.fail("the first Segment measured"))
    from medseg.model.infer import segment

    result = segment(crop_volume(ct_dir, ABDOMEN), package, device="auto")
    assert result.cpu_engine["measured"] and result.cpu_engine["reason"] == record["reason"]
    assert result.device_used == record["device"]


def test_verify_measure_measures_again_and_rewrites_the_record(catalogue_file, measuring, capsys):
    catalogue_file()
    install(MODEL_ID)
    package = open_model(installed_model_path(MODEL_ID)).package
    key, record = _record_of(package, measuring)
    store = json.loads(measuring.read_text())
    store[key] = {**record, "reason": "an old measurement", "measured_on": "2000-01-01", "seconds": {"cpu": 99.0}}
    measuring.write_text(json.dumps(store))
    assert main(["models", "verify", "--measure", MODEL_ID]) == 0
    out = capsys.readouterr().out
    _key, again = _record_of(package, measuring)
    assert again["measured_on"] == date.today().isoformat() and again["reason"] != "an old measurement"
    assert set(again["seconds"]) == {"cpu", "onnx-cpu"}
    assert f"{MODEL_ID}: ok" in out and f"{MODEL_ID} (3mm): CPU engine {again['engine']} ({again['reason']})" in out


def test_verify_measure_with_a_pinned_engine_measures_nothing(catalogue_file, measuring, monkeypatch, capsys):
    catalogue_file()
    monkeypatch.setenv(cpu_runtime.PIN_VARIABLE, "cpu")
    install(MODEL_ID)
    assert main(["models", "verify", "--measure"]) == 0
    assert "CPU engine set by MEDSEG_CPU_ENGINE: nothing to measure" in capsys.readouterr().out
    assert not measuring.exists()


def test_verify_measure_measures_the_built_in_starter(measuring, capsys):
    from medseg.workflows.models import open_model as open_starter

    assert main(["models", "verify", "--measure", "starter"]) == 0
    package = open_starter(None).package
    digest = cpu_runtime.model_digest(package, "2d")
    (record,) = [r for r in json.loads(measuring.read_text()).values() if r["model"] == digest]
    assert record["measured_on"] == date.today().isoformat()
    assert f"starter (2d): CPU engine {record['engine']} ({record['reason']})" in capsys.readouterr().out
