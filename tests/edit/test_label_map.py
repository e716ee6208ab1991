"""LabelMap: the table, the dtype, counts kept from deltas."""

from __future__ import annotations

import numpy as np
from edit_cases import LIVER

from medseg.core.label_colors import name_color
from medseg.edit.delta import Delta
from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import LabelMap


def test_table_has_standard_names_and_colours(abdomen):
    image, label_map = abdomen
    assert label_map.array.dtype == np.uint8 and label_map.same_grid(image)
    present = set(np.unique(label_map.array).tolist()) - {0}
    assert set(label_map.labels) == present and len(present) == 41
    assert label_map.labels[LIVER].name == "liver"
    assert label_map.labels[LIVER].color == name_color("liver")
    assert label_map.voxel_count(LIVER) == 38_634  # the README's figure for this file


def test_counts_follow_deltas_and_widen_to_uint16(abdomen):
    image, label_map = abdomen
    doc = SegmentationDocument()
    doc.set_volume(image)
    doc.set_label_map(label_map)
    lm = doc.label_map
    block = lm.array[10:14, 40:60, 40:60].copy()
    after = block.astype(np.uint16)
    after[::2] = 300  # past uint8
    assert doc.apply(Delta.from_blocks((10, 40, 40), block, after), "paint 300")
    assert lm.array.dtype == np.uint16
    assert np.array_equal(np.bincount(lm.array.ravel(), minlength=301)[:len(lm.counts)], lm.counts[:301])
    assert 300 in lm.labels
    doc.undo()
    assert np.array_equal(lm.array[10:14, 40:60, 40:60], block)
    assert np.array_equal(np.bincount(lm.array.ravel()), lm.counts[:lm.array.max() + 1])


def test_delta_bytes_round_trip(abdomen):
    _, label_map = abdomen
    block = label_map.array[5:25].copy()
    after = np.where(block == LIVER, 0, block).astype(block.dtype)
    delta = Delta.from_blocks((5, 0, 0), block, after)
    again = Delta.from_bytes(delta.to_bytes())
    assert again.box == delta.box and np.array_equal(again.mask(), delta.mask())
    assert np.array_equal(again.old, delta.old) and np.array_equal(again.new, delta.new)
    assert again.count == np.count_nonzero(block == LIVER)


def test_empty_like_is_background_on_the_image_grid(chest_image):
    lm = LabelMap.empty_like(chest_image)
    assert lm.same_grid(chest_image) and lm.array.dtype == np.uint8 and not lm.array.any() and lm.labels == {}


def test_value_counts_of_a_whole_series_equal_numpys_unique_counts(ct_dir):
    """The chunked count (the GUI thread counts a new segmentation's voxels with it) against np.unique,
    on a real CT cut into five tissue classes by HU: 512 x 512 x 48 voxels, far past one chunk."""
    import SimpleITK as sitk

    from medseg.edit.delta import value_counts

    hu = sitk.GetArrayFromImage(sitk.ReadImage(str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")))
    classes = np.digitize(hu, [-900, -200, 0, 300]).astype(np.uint8).ravel()
    values, counts = np.unique(classes, return_counts=True)
    expected = np.zeros(int(values.max()) + 1, dtype=np.int64)
    expected[values] = counts
    assert len(values) == 5
    assert np.array_equal(value_counts(classes), expected)
    assert np.array_equal(value_counts(classes[:100_001], chunk=1 << 12), np.bincount(classes[:100_001]))  # a part chunk


def test_a_worker_can_load_the_colour_science_before_the_merge_needs_it():
    """prepare_distinct_colors (called in Segment's worker) loads the two functions distinct_color uses, so the
    merge on the GUI thread imports nothing: skimage.color is a lazy module, importing it alone loads neither."""
    import subprocess
    import sys

    probe = ("import sys\nfrom medseg.core.label_colors import prepare_distinct_colors\n"
             "before = 'skimage.color.delta_e' in sys.modules\nprepare_distinct_colors()\n"
             "print(before, 'skimage.color.delta_e' in sys.modules, 'skimage.color.colorconv' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr
