"""The Edit panel is generated from the operation catalogue: every operation is reachable there under
its catalogue name (a button on the active label, or the interactive tool that performs it), every
setting is a widget with the catalogue's range and unit, and a button does exactly what the same
operation does in a ``medseg edit`` recipe."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QAbstractButton, QCheckBox, QDoubleSpinBox, QSlider, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import LabelMap
from medseg.edit.operations import CATALOGUE
from medseg.edit.recipe import Operation, run_operations, validate
from medseg.io import read_image


def test_every_operation_and_setting_is_in_the_edit_panel(window, artifacts_dir):
    panel = window.editing.panel
    window.show()
    panel.grab().save(str(artifacts_dir / "edit_panel_catalogue.png"))
    controller = window.view.tools
    for name, op in CATALOGUE.items():
        if op.gesture is not None:  # a mouse tool: its button and its key, from the catalogue
            button = panel.tool_buttons[name]
            assert button.objectName() == name and button.defaultAction().shortcut().toString() == op.shortcut
        elif any(p.kind == "segmentation-file" for p in op.parameters):
            continue  # Segment ends with it (tests/gui/test_segment_over_labels.py)
        elif any(p.kind == "model" for p in op.inputs):  # model-backed: the Segment panel's button runs it
            assert window.segment_action.shortcut().toString() == "Ctrl+G"
            assert window.segment_panel.run_button.text() == op.title
            continue
        else:
            button = panel.operation_buttons[name]
            assert isinstance(button, QAbstractButton)
            assert button.objectName() == name
        for parameter in op.settings:
            widget = panel.findChild(QWidget, parameter.name)
            assert widget is not None, f"{name}: no widget for {parameter.name}"
            prop = controller.settings[parameter.name]
            assert (prop.minimum, prop.maximum, prop.unit) == (parameter.minimum, parameter.maximum, parameter.unit)
            assert prop.value == parameter.default
            if isinstance(widget, QDoubleSpinBox):
                assert (widget.minimum(), widget.maximum()) == (parameter.minimum, parameter.maximum)
                assert widget.suffix().strip() == parameter.unit
            elif parameter.kind == "flag":
                assert isinstance(widget, QCheckBox) and widget.isChecked() == parameter.default
            else:
                assert isinstance(widget, QSlider)  # the seed locality, in half units
                assert widget.maximum() / 2 == parameter.maximum


def test_panel_buttons_do_what_the_recipe_does(window, ct_dir, qtbot):
    """Every button operation, clicked with non-default settings, gives the label map the recipe gives
    with the same names and values (TotalSegmentator's abdomen, voxel for voxel)."""
    folder = ct_dir / "totalsegmentator"
    image = read_image(folder / "example_ct_sm.nii.gz")
    labels = read_image(folder / "example_seg.nii.gz")
    start = LabelMap.from_volume(labels.with_array(np.array(labels.array, copy=True)),
                                 name_set="TotalSegmentator v2 (total)")
    doc, panel = window.document, window.editing.panel
    doc.set_volume(image)
    doc.set_label_map(LabelMap.from_volume(labels.with_array(start.array.copy()), start.labels))
    by_name = {e.name: v for v, e in start.labels.items()}
    liver, spleen = by_name["liver"], by_name["spleen"]
    window.view.set_active_label(liver)
    panel.merge_box.setCurrentIndex(panel.merge_box.findData(spleen))
    settings = {"hu_low": 80.0, "hu_high": 160.0, "margin_mm": 3.0, "island_ml": 4.0, "smooth_mm": 2.0}
    for name, value in settings.items():
        panel.findChild(QDoubleSpinBox, name).setValue(value)
    clicked = [n for n in ("threshold", "grow", "smooth", "shrink", "remove-smaller", "fill-holes", "keep-largest",
                           "interpolate", "union", "subtract", "intersect")]
    assert set(clicked) == {n for n, op in CATALOGUE.items() if op.gesture is None and not op.inputs and not op.locks}
    for name in clicked:
        panel.operation_buttons[name].click()

    recipe = []
    for name in clicked:
        raw = []
        for parameter in CATALOGUE[name].positional:
            if parameter.is_setting:
                raw.append(str(settings[parameter.name]))
            else:
                raw.append("spleen" if parameter.name == "b" else "liver")
        recipe.append(Operation(name, tuple(raw)))
    batch = SegmentationDocument()
    batch.set_volume(image)
    batch.set_label_map(LabelMap.from_volume(labels.with_array(start.array.copy()), start.labels))
    run_operations(batch, validate(recipe, batch.label_map, image))
    assert np.array_equal(doc.label_map.array, batch.label_map.array)
    changed = doc.label_map.array != start.array  # the operations did change it
    assert changed.sum() > 1000 and not (doc.label_map.array == liver).any()  # intersect with spleen empties liver
