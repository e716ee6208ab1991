"""The Qt-free parts: segmentation document, view state, view axes and the LUT renderer, on real CT."""

from __future__ import annotations

import numpy as np
import pytest

from medseg.core.labels import Label
from medseg.edit.document import SegmentationDocument
from medseg.errors import GeometryError
from medseg.gui.common.view_state import DEFAULT_PRESETS, ViewState
from medseg.gui.viewer.slice_render import SliceRenderer, outline_of
from medseg.gui.viewer.view_axes import view_axes
from medseg.io import read_image


@pytest.fixture(scope="module")
def lung(ct_dir):
    return read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"), read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd")


def test_document_notifies_and_clamps(lung):
    image, label_map = lung
    doc = SegmentationDocument()
    view = ViewState(doc)
    events: list[str] = []
    for model, name in ((doc, "volume_changed"), (view, "cursor_changed"), (view, "window_changed"),
                        (doc, "label_map_changed"), (doc, "labels_changed")):
        getattr(model, name).connect(lambda n=name: events.append(n))
    doc.set_volume(image)
    # the view state follows a new image before any widget hears of it: centred, the header's window
    assert view.cursor_xyz == (256, 256, 24) and events == ["volume_changed"]
    assert view.window_preset == "Auto (header)" and (view.window_center, view.window_width) == view.auto_window()
    view.move_cursor(2, 100)
    assert view.cursor_xyz[2] == 47  # clamped to the last slice
    view.apply_preset("Lung")
    assert (view.window_center, view.window_width) == DEFAULT_PRESETS["Lung"]
    doc.set_label_map(label_map, {1: Label(1, "nodule", (255, 0, 0))})
    assert doc.label_at((0, 0, 0)) == 0
    nodule = np.argwhere(label_map.array == 1)[0]
    assert doc.label_at(tuple(int(v) for v in nodule[::-1])) == 1
    assert doc.value_at((10, 20, 30)) == float(image.array[30, 20, 10])
    assert events.count("label_map_changed") == 1


def test_document_refuses_a_label_map_on_another_grid(lung, ct_dir):
    image, _ = lung
    doc = SegmentationDocument()
    doc.set_volume(image)
    other = read_image(ct_dir / "totalsegmentator" / "example_seg.nii.gz")
    with pytest.raises(GeometryError):
        doc.set_label_map(other, {})


def test_view_axes_flip_a_ras_volume_into_radiological_convention(ct_dir):
    ras = read_image(ct_dir / "totalsegmentator" / "example_ct.nii.gz")
    assert ras.direction[0, 0] < 0  # stored RAS: index x runs to the patient's right
    axial = view_axes("axial", ras.direction)
    assert axial.normal_axis == 2 and axial.flip_horizontal
    plane = axial.slice_of(ras.array, 50)
    assert plane.base is not None  # a view into the volume, not a copy
    assert np.array_equal(plane, ras.array[50][::-1, ::-1])
    coronal = view_axes("coronal", np.eye(3))
    assert (coronal.normal_axis, coronal.horizontal_axis, coronal.vertical_axis, coronal.flip_vertical) == (1, 0, 2, True)
    sagittal = view_axes("sagittal", np.eye(3))
    assert (sagittal.horizontal_axis, sagittal.flip_horizontal) == (1, False)


def test_renderer_window_level_and_blend(lung):
    image, label_map = lung
    renderer = SliceRenderer()
    renderer.set_window(-600, 1500)
    values = image.array[32]
    words = renderer.render(values)
    grey = (words & 0xFF).astype(int)
    expected = np.clip(np.rint((values.astype(float) + 1350) * 255 / 1500), 0, 255)
    assert np.abs(grey - expected).max() <= 1
    colors = np.zeros((256, 3), np.uint8)
    colors[1] = (255, 0, 0)
    renderer.set_labels(colors, np.ones(256, bool), 1.0)
    labels = label_map.array[32].astype(np.uint8)
    blended = renderer.render(values, labels)
    assert labels.any()
    assert np.all(blended[labels == 1] == np.uint32(0xFFFF0000))
    assert np.array_equal(blended[labels == 0], words[labels == 0])


def test_outline_keeps_only_the_border():
    labels = np.zeros((9, 9), np.uint8)
    labels[2:7, 2:7] = 3
    outline = outline_of(labels)
    assert outline[4, 4] == 0 and outline[2, 4] == 3 and outline[4, 2] == 3
    assert int((outline == 3).sum()) == 16
