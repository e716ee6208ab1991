"""Fixtures of the catalogue tests: a loopback server, a small real nnU-Net model zipped as
TotalSegmentator publishes its weights, and a catalogue that points at the server."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))  # nnunet_fixture
from catalogue_fixtures import LICENSED_ID, MODEL_ID, ZIP_NAME
from loopback_server import LoopbackServer
from nnunet_fixture import DATASET_NAME, make_nnunet_result_folder


@pytest.fixture(autouse=True)
def _isolated_models(tmp_path, monkeypatch):
    """Models, the system-wide folder and TotalSegmentator's home are the test's own; no proxy."""
    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", str(tmp_path / "system-models"))
    for variable in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY",
                     "TOTALSEG_HOME_DIR", "TOTALSEG_WEIGHTS_PATH"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(scope="session")
def result_root(tmp_path_factory) -> Path:
    """A weights folder as TotalSegmentator keeps it: Dataset901_.../nnUNetTrainer__nnUNetPlans__3d_fullres/..."""
    root = tmp_path_factory.mktemp("weights")
    make_nnunet_result_folder(root, base_features=8, n_stages=3, patch_size=(16, 32, 32), seed=1)
    return root


@pytest.fixture(scope="session")
def model_zip(result_root) -> bytes:
    """The dataset folder zipped as TotalSegmentator's release script does (the folder at the root)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((result_root / DATASET_NAME).rglob("*")):
            archive.write(path, path.relative_to(result_root).as_posix())
    return buffer.getvalue()


def entry(model_id: str, url: str, size: int | None, sha256: str | None, licensed: bool = False,
          version: str = "1.0") -> dict:
    return {
        "id": model_id, "title": "A tiny test model", "publisher": "tests", "version": version, "modality": "CT",
        "structures": [{"value": 1, "name": "liver", "group": "organs"}, {"value": 2, "name": "spleen", "group": "organs"}],
        "configurations": [{"name": "3mm", "spacing_mm": [1.5, 1.5, 3.0], "datasets": [901],
                            "trainer": "nnUNetTrainer", "nnunet_configuration": "3d_fullres"}],
        "files": [{"dataset": 901, "name": ZIP_NAME, "urls": [url], "size": size, "sha256": sha256}],
        "licence": {"spdx": "LicenseRef-Test" if licensed else "Apache-2.0", "url": "https://example.invalid/licence",
                    "commercial_use": not licensed, "acceptance_required": licensed,
                    "terms": "Non-commercial use only, for the tests." if licensed else "Apache License 2.0."},
        "citation": "A test.", "medseg_support": {"status": "networks", "note": ""},
    }


@pytest.fixture
def server():
    with LoopbackServer() as running:
        yield running


@pytest.fixture
def catalogue_file(tmp_path, server, model_zip, monkeypatch):
    """Write a catalogue (MEDSEG_CATALOGUE) whose entries download from the loopback server."""
    server.files[f"/{ZIP_NAME}"] = model_zip

    def write(sha256: str | None = "published", licensed_sha: str | None = None, version: str = "1.0",
              url: str | None = None, payload: bytes = model_zip) -> Path:
        server.files[f"/{ZIP_NAME}"] = payload
        digest = hashlib.sha256(payload).hexdigest() if sha256 == "published" else sha256
        document = {"format": "medseg-model-catalogue", "format_version": 1, "models": [
            entry(MODEL_ID, url or f"{server.url}/{ZIP_NAME}", len(payload), digest, version=version),
            entry(LICENSED_ID, f"{server.url}/{ZIP_NAME}", len(payload), licensed_sha, licensed=True)]}
        path = tmp_path / f"catalogue-{version}-{sha256 or 'none'}.json"
        path.write_text(json.dumps(document))
        monkeypatch.setenv("MEDSEG_CATALOGUE", str(path))
        return path

    return write


@pytest.fixture
def weights_copy(tmp_path, result_root) -> Path:
    copy = tmp_path / "totalseg-home" / "nnunet" / "results"
    shutil.copytree(result_root, copy)
    return copy
