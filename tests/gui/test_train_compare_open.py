"""Export & compare: "Open in Segment tab with both outputs" on a real validation case.

Two models: the built-in starter (A) and a 2-iteration CPU fine-tune of it (B, about 3 s; its output
differs from the starter's on this case, so a swap of the layers would show). Model A's output becomes the editable label map, model B's the read-only comparison layer
drawn as outlines in all three views; B's voxels are checked against ``medseg.model.infer.segment``
run independently, and toggling B must change the rendered pixels.
"""

from __future__ import annotations

import json

import numpy as np

import medseg.model.infer as infer
from medseg.model.datasets import open_dataset
from medseg.model.training import TrainConfig, run_training
from medseg.workflows.models import open_model

DCMQI = "dcmqi_ct3slice_masks"  # a real 3-slice GE CT: the starter segments it in about a second


def _pixels(image) -> np.ndarray:
    """The words of a rendered slice (0xAARRGGBB), read from the QImage the view shows."""
    rows = np.frombuffer(image.constBits(), dtype=np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, : 4 * image.width()].copy().view(np.uint32)


def test_open_validation_case_with_both_models(window, qtbot, ct_dir, tmp_path, artifacts_dir, monkeypatch):
    tab = window.train_tab
    panel, training, export = tab.dataset_panel, tab.training_panel, tab.export_panel
    panel.set_workspace(tmp_path / "workspace")
    errors: list = []
    tab.failed.connect(errors.append)
    manifest = tmp_path / "val.json"  # one real CT held out, labelled by the starter's rule-based labeller
    manifest.write_text(json.dumps({
        "name": "val", "data_root": str(ct_dir / DCMQI), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "ge3", "image": "image", "label_rule": "starter"}], "validation": ["ge3"]}))
    panel.add_folder(str(manifest))  # the panel opens a manifest as it opens a folder
    qtbot.waitUntil(lambda: panel.job is None and all(e.info is not None for e in panel.training_set.entries),
                    timeout=120_000)
    training.form.refresh_labels()
    tuning = tmp_path / "tune.json"  # the same case, for training: the fine-tune only needs to differ
    tuning.write_text(manifest.read_text().replace(', "validation": ["ge3"]', ""))
    package_b = str(run_training(open_dataset(tuning), tmp_path / "fine-tune", TrainConfig(
        epochs=1, iterations_per_epoch=2, batch_size=1, learning_rate=0.05, device="cpu"),
        base_package=open_model().package).package_path)
    export.add_model("")
    export.add_model(package_b)
    tab.pages.setCurrentWidget(export)
    export.compare_button.click()
    qtbot.waitUntil(lambda: export.job is None, timeout=300_000)
    assert not errors, errors
    assert [export.case_combo.itemText(i) for i in range(export.case_combo.count())] == ["ge3"]
    model_a, model_b = export.model_a_combo.currentText(), export.model_b_combo.currentText()
    assert "built in" in model_a and "fine-tune" in model_b

    # The evaluation kept both outputs: opening the case runs no inference.
    calls = []
    real_segment = infer.segment
    monkeypatch.setattr(infer, "segment", lambda *a, **k: calls.append(1) or real_segment(*a, **k))
    export.open_button.click()
    qtbot.waitUntil(lambda: export.job is None, timeout=120_000)
    assert not errors, errors
    assert calls == []
    monkeypatch.setattr(infer, "segment", real_segment)
    document = window.document
    comparison = window.view.comparison
    assert comparison is not None and window.tabs.currentIndex() == 0
    assert comparison.name == model_b and comparison.primary_name == model_a

    # Independent oracle: the validation case's image and model B run through the engine directly.
    image = open_dataset(manifest).load(open_dataset(manifest).specs[0]).image
    assert np.array_equal(document.volume.array, image.array)
    expected_a = real_segment(image, open_model().package, device="cpu").label_map
    expected_b = real_segment(image, open_model(package_b).package, device="cpu").label_map
    assert not np.array_equal(expected_a.array, expected_b.array)  # two different outputs to tell apart
    assert np.array_equal(comparison.label_map.array, expected_b.array)
    assert np.array_equal(document.label_map.array, expected_a.array)
    assert comparison.label_map.same_grid(document.volume)
    assert not comparison.label_map.array.flags.writeable  # read-only
    assert document.label_map.array.flags.writeable and document.label_map.array is not comparison.label_map.array
    values_b = set(np.unique(expected_b.array).tolist()) - {0}
    assert set(comparison.labels) == values_b and values_b
    names_b = {v: n for v, n in open_model(package_b).package.names.items() if v}
    assert {v: e.name for v, e in comparison.labels.items()} == {v: names_b[v] for v in values_b}
    legend = window.comparison_legend
    assert legend.isVisible() and "B</b> (outlines, read-only): " + model_b in legend.text.text()

    # Toggling B changes the rendered pixels in all three views, and only on B's outlines.
    viewer = window.viewer
    shown = {}
    for name, view in viewer.views.items():
        assert view.display_comparison is not None
        shown[name] = _pixels(view.render_slice())
    legend.show_b.setChecked(False)
    assert not window.view.comparison_visible
    for name, view in viewer.views.items():
        hidden = _pixels(view.render_slice())
        changed = shown[name] != hidden
        assert changed.any(), name
        outline_colours = set(viewer.renderer.comparison_words[list(values_b)].tolist())
        assert set(np.unique(shown[name][changed]).tolist()) <= outline_colours, name
    legend.show_b.setChecked(True)
    # The user edits A (drops its bones): B's bone outlines still show where the model put them.
    bones = next(v for v, e in document.labels.items() if e.name == "bones")
    assert document.delete_label(bones)
    assert bones in set(np.unique(comparison.label_map.array).tolist())  # B untouched by edits to A
    qtbot.waitUntil(lambda: not window.overlay_panel.labels.model.index_of(bones).isValid())  # the table dropped it
    window.grab().save(str(artifacts_dir / "gui_compare_two_models.png"))
    assert not errors, errors
