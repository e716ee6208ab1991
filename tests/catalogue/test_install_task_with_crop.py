"""A TotalSegmentator task that crops installs whole: the catalogue's install fetches the network that finds
its crop (listed by another entry: total's 6 mm one for liver_segments) with the task's own, so the task runs
through TotalSegmentator's pipeline (crop, resampling, merge), not as a bare network.

Weights: random, in TotalSegmentator's exact layout (tests/model/ts_fixture.py), zipped as its release
script zips them, served by a loopback server; the catalogue is medseg's own with those two downloads
pointed at the server. The oracle for which networks are needed is TotalSegmentator's own task table.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from ts_fixture import make_task_weights

from medseg.catalogue import load_catalogue
from medseg.catalogue.install import install
from medseg.model.kinds.totalseg_kind import TOTALSEG_MODEL
from medseg.workflows.models import open_model

TASK = "liver_segments"


def _zip(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            archive.write(path, path.relative_to(folder.parent).as_posix())
    return buffer.getvalue()


def _crop_networks_totalsegmentator_downloads(task: str) -> set[int]:
    """What TotalSegmentator 2.18.0 fetches for ``task`` beyond its own networks: its crop model (python_api)."""
    from totalsegmentator.map_tasks_config import TASK_CONFIGS

    config = TASK_CONFIGS[task]
    assert config.get("crop") and not config.get("crop_model")  # the 6 mm total network crops it
    return {297} if config.get("robust_crop") else {298}


@pytest.fixture
def served_catalogue(tmp_path, server, monkeypatch):
    weights = make_task_weights(tmp_path / "weights", TASK)
    document = json.loads(load_catalogue().source.read_text(encoding="utf-8"))
    served = {}
    for folder in sorted(weights.glob("Dataset*")):
        dataset = int(folder.name[7:10])
        payload = _zip(folder)
        server.files[f"/{folder.name}.zip"] = payload
        served[dataset] = f"{server.url}/{folder.name}.zip"
    for raw in document["models"]:
        for weight in raw.get("files", []):
            if weight.get("dataset") in served:
                weight.update(urls=[served[weight["dataset"]]], size=None, sha256=None)
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps(document))
    monkeypatch.setenv("MEDSEG_CATALOGUE", str(path))
    return served


def test_a_cropped_task_installs_with_the_network_that_crops_it(served_catalogue, server):
    own = {weight.dataset for weight in load_catalogue().get(f"totalsegmentator/{TASK}").files}
    crop = _crop_networks_totalsegmentator_downloads(TASK)
    assert crop <= set(served_catalogue) and not crop & own  # another entry (total) publishes it

    record = install(f"totalsegmentator/{TASK}", accept_licence=True)
    fetched = {r["path"] for r in server.requests}
    assert {f"/{Path(url).name}" for d, url in served_catalogue.items() if d in own | crop} <= fetched
    assert {source["name"] for source in record.sources} >= {Path(served_catalogue[d]).name for d in own | crop}

    opened = open_model(f"totalsegmentator/{TASK}")
    assert opened.card.kind == TOTALSEG_MODEL  # TotalSegmentator's pipeline, not a bare network
    manifest = json.loads((opened.card.source / "totalseg.json").read_text(encoding="utf-8"))
    assert set(manifest["parts"]) == {str(d) for d in own | crop}  # the crop network converted with the task's
    assert all((opened.card.source / folder).is_dir() for folder in manifest["parts"].values())
    assert set(opened.pipeline.configuration_names()) == {"default"}
