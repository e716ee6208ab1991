"""The view state's read-only comparison layer, without a window, on the real GE 3-slice CT."""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.core.label_colors import color_for
from medseg.core.labels import Label
from medseg.edit.document import SegmentationDocument
from medseg.errors import GeometryError
from medseg.gui.common.view_state import ViewState
from medseg.io import load

DCMQI = "dcmqi_ct3slice_masks"


def test_comparison_layer_is_read_only_and_follows_the_image(ct_dir):
    image = load(ct_dir / DCMQI / "image")
    spine = sitk.GetArrayFromImage(sitk.ReadImage(str(ct_dir / DCMQI / "masks" / "liver_spine_seg.nrrd")))
    document = SegmentationDocument()
    view = ViewState(document)
    seen = []
    view.comparison_changed.connect(lambda: seen.append(view.comparison))
    with pytest.raises(GeometryError, match="open an image"):
        view.set_comparison(image.with_array(spine.astype(np.uint8)), {1: Label(1, "liver")}, "B")
    document.set_volume(image)
    with pytest.raises(GeometryError, match="does not match"):
        view.set_comparison(image.with_array(np.zeros((3, 256, 256), np.uint8)), {}, "B")
    document.set_label_map(image.with_array((spine == 1).astype(np.uint8)))
    view.set_comparison(image.with_array(spine.astype(np.uint8)), {1: Label(1, "liver"), 2: Label(2, "spine")}, "model B", "model A")
    layer = view.comparison
    assert seen[-1] is layer and view.comparison_visible
    assert {v: (e.name, e.color) for v, e in layer.labels.items()} == {
        1: ("liver", color_for(1, "liver")), 2: ("spine", color_for(2, "spine"))}
    with pytest.raises(ValueError):
        layer.label_map.array[0, 0, 0] = 2  # nothing edits a comparison
    view.set_comparison_visible(False)
    assert not view.comparison_visible and len(seen) == 2
    document.set_volume(image)  # a new image: the comparison belonged to the old one
    assert view.comparison is None and seen[-1] is None
