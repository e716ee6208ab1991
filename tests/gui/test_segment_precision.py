"""The Segment panel's precision choice (issue #51 item 3): "int8 (verified)" is offered only for a model
whose int8 tier passed its gate on this computer; the plan says which precision runs and why, and a
Segment in int8 says so in its labels' algorithm version.

The tier is verified, as ``medseg models verify --tier int8`` does, on the top 16 slices of TotalSegmentator's
example CT (the starter's gate is tested both ways in tests/model/test_precision_tier.py); the window opens
those slices. Without a record (a fresh cache) the choice is not offered at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import SimpleITK as sitk

from medseg.model.package import load_package, starter_model_path


@pytest.fixture(scope="module")
def lung_bases_file(ct_dir, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("precision-gui") / "lung_bases.nii.gz"
    sitk.WriteImage(sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_ct.nii.gz"))[:, :, 96:112], str(path))
    return path


@pytest.fixture(scope="module")
def verified_cache(lung_bases_file, tmp_path_factory):
    from medseg.core.volume import Volume
    from medseg.workflows.precision import verify_tier

    folder = tmp_path_factory.mktemp("precision-gui-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDSEG_CACHE_DIR", str(folder))
        volume = Volume.from_sitk(sitk.ReadImage(str(lung_bases_file)))
        (record,) = verify_tier("starter", "int8", volume, threads=1, accuracy_control=False)
        yield folder, record


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "fresh-cache"))


def _plan_text(panel) -> str:
    return panel.plan_label.toPlainText()


def test_without_a_verified_tier_only_float32_runs(fresh_cache, window, driver, lung_bases_file, qtbot):
    driver.open_image_file(lung_bases_file)
    panel = window.segment_panel
    qtbot.waitUntil(lambda: "Precision:" in _plan_text(panel), timeout=60_000)
    assert not panel.precision_box.isVisible() and panel.precision_box.count() == 1
    assert panel.precision == "f32"
    assert "Precision: float32, the exact path." in _plan_text(panel)


def test_a_verified_int8_tier_is_offered_and_a_segment_in_it_says_so(verified_cache, window, driver,
                                                                      lung_bases_file, qtbot, artifacts_dir):
    _, record = verified_cache
    assert record.offered, record.shortfalls
    driver.open_image_file(lung_bases_file)
    panel = window.segment_panel
    qtbot.waitUntil(lambda: "Precision:" in _plan_text(panel), timeout=60_000)
    box = panel.precision_box
    assert box.isVisible() and [box.itemData(i) for i in range(box.count())] == ["f32", "int8"]
    assert box.itemText(1) == "Precision: int8 (verified)"
    assert f"{record.agreement:.3%} equal to float32's" in box.itemData(1, 3)  # 3: the tooltip role
    assert "Precision: float32, the exact path (int8 verified here" in _plan_text(panel)  # the default stays exact

    box.setCurrentIndex(1)
    assert panel.precision == "int8"
    assert "Precision: int8, chosen by you, not the exact float32 path" in _plan_text(panel)
    with qtbot.waitSignal(window.loader.segmented, timeout=600_000) as blocker:
        window.segment_action.trigger()
    result = blocker.args[0]
    stated = load_package(starter_model_path()).version
    assert result.details["precision"] == "int8"
    assert {entry.provenance.algorithm_version for entry in window.document.labels.values()} == {f"{stated} (int8)"}
    assert "in int8 (verified, not the exact float32 path)" in window.messages.text()  # the status line says it too
    window.grab().save(str(artifacts_dir / "segment_precision_int8.png"))  # the panel's choice and plan, after the run
