"""Fixtures for the tests that talk to a real Orthanc (marked `pacs`; run by `.ci/pacs-test`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from orthanc_server import ORTHANC_AET, Orthanc, make_certificate, require_private_netns

from medseg.io.pacs import PacsServer

HTTP_PORT, DICOM_PORT, STORAGE_PORT = 8042, 4242, 11112
SECURE_HTTP_PORT, SECURE_DICOM_PORT = 8043, 4243
OUR_AET = "MEDSEG"
USER, PASSWORD = "radiologist", "correct horse battery"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.pacs)


class MemoryKeyring:
    """A keyring backend in memory: the tests' stand-in for the OS keyring."""

    def __new__(cls):
        import keyring.backend

        class _Ring(keyring.backend.KeyringBackend):
            priority = 1

            def __init__(self):
                super().__init__()
                self.secrets: dict[tuple[str, str], str] = {}

            def get_password(self, service, username):
                return self.secrets.get((service, username))

            def set_password(self, service, username, password):
                self.secrets[(service, username)] = password

            def delete_password(self, service, username):
                self.secrets.pop((service, username), None)

        return _Ring()


@pytest.fixture(autouse=True)
def memory_keyring(monkeypatch, tmp_path):
    import keyring

    ring = MemoryKeyring()
    previous = keyring.get_keyring()
    keyring.set_keyring(ring)
    monkeypatch.setenv("MEDSEG_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("MEDSEG_PACS_PASSWORD", raising=False)
    monkeypatch.delenv("MEDSEG_PACS_TOKEN", raising=False)
    yield ring
    keyring.set_keyring(previous)


@pytest.fixture(scope="session")
def netns_ok():
    problem = require_private_netns()
    if problem:
        pytest.fail(problem)


def ct3_files(ct_dir: Path) -> list[Path]:
    return sorted((ct_dir / "dcmqi_ct3slice_masks" / "image").glob("*.dcm"))


def philips_1mm_files(ct_dir: Path) -> list[Path]:
    return sorted((ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series").glob("S2020_*"))


@pytest.fixture(scope="module")
def orthanc(netns_ok, tmp_path_factory, ct_dir):
    """One Orthanc per module, loaded with two real CT series (3 and 16 slices)."""
    server = Orthanc(tmp_path_factory.mktemp("orthanc"), HTTP_PORT, DICOM_PORT,
                     modalities={OUR_AET: ("127.0.0.1", STORAGE_PORT)})
    server.start()
    try:
        server.upload(ct3_files(ct_dir) + philips_1mm_files(ct_dir))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def secure_orthanc(netns_ok, tmp_path_factory):
    """A second Orthanc with DICOM TLS and HTTP basic authentication. (Not HTTPS: Debian's
    Orthanc 1.10.1 crashes with SIGSEGV on the first HTTPS connection, checked with curl.)"""
    folder = tmp_path_factory.mktemp("orthanc-secure")
    cert, key, both = make_certificate(folder)
    server = Orthanc(folder, SECURE_HTTP_PORT, SECURE_DICOM_PORT, modalities={OUR_AET: ("127.0.0.1", STORAGE_PORT)},
                     AuthenticationEnabled=True,
                     RegisteredUsers={USER: PASSWORD}, DicomTlsEnabled=True, DicomTlsCertificate=str(cert),
                     DicomTlsPrivateKey=str(key), DicomTlsTrustedCertificates=str(cert),
                     DicomTlsRemoteCertificateRequired=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def web_server(orthanc: Orthanc, **changes) -> PacsServer:
    return PacsServer(**{"name": "orthanc-web", "protocol": "dicomweb", "url": orthanc.dicomweb_url,
                         "timeout_s": 10.0, **changes})


def dimse_server(orthanc: Orthanc, **changes) -> PacsServer:
    return PacsServer(**{"name": "orthanc-dimse", "protocol": "dimse", "host": "127.0.0.1", "port": orthanc.dicom_port,
                         "called_aet": ORTHANC_AET, "our_aet": OUR_AET, "storage_port": STORAGE_PORT,
                         "timeout_s": 10.0, **changes})


def copy_files(files, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, folder / path.name)
    return folder
