"""The renderer's x-major copies: the planes it reads are exactly the array's, always.

Oracle: ``ViewAxes.slice_of`` on the array itself (plain numpy indexing), on real CT,
for every view, before, during and after the background copy, and after in-place edits. Where a
plane comes from is seen from outside: sliced from the array it is a view of the array's memory,
read from the x-major copy it is not.
"""

from __future__ import annotations

import numpy as np
import pytest

from medseg.gui.viewer.slice_render import SLAB, SliceRenderer
from medseg.gui.viewer.view_axes import VIEW_NAMES, view_axes
from medseg.io import read_image


@pytest.fixture(scope="module")
def ct(ct_dir):
    image = read_image(ct_dir / "totalsegmentator" / "example_ct.nii.gz")  # RAS on disk: flipped axes
    values = np.clip(image.array, -32768, 32767).astype(np.int16)
    return image.direction, values, (values > 100).astype(np.uint8)


def _all_planes_match(renderer, array, direction):
    for name in VIEW_NAMES:
        axes = view_axes(name, direction)
        count = array.shape[2 - axes.normal_axis]
        for position in (0, count // 3, count - 1):
            assert np.array_equal(renderer.plane(array, axes, position), axes.slice_of(array, position)), (name, position)


def test_planes_equal_the_arrays_before_and_after_the_copy(ct):
    direction, values, labels = ct
    renderer = SliceRenderer()
    _all_planes_match(renderer, values, direction)  # first call: sliced directly, copy started
    _all_planes_match(renderer, labels, direction)
    assert renderer.x_major.wait_until_built(120)
    sagittal = next(view_axes(n, direction) for n in VIEW_NAMES if view_axes(n, direction).normal_axis == 0)
    assert np.shares_memory(sagittal.slice_of(values, 40), values)  # slicing the array gives a view of it...
    assert not np.shares_memory(renderer.plane(values, sagittal, 40), values)  # ...so this one is the copy's
    _all_planes_match(renderer, values, direction)
    _all_planes_match(renderer, labels, direction)


def test_an_in_place_edit_is_seen_at_once_and_after_the_rebuild(ct):
    direction, values, labels = ct
    labels = labels.copy()
    renderer = SliceRenderer()
    sagittal = next(view_axes(n, direction) for n in VIEW_NAMES if view_axes(n, direction).normal_axis == 0)
    renderer.plane(labels, sagittal, 50)
    assert renderer.x_major.wait_until_built(120)
    box = ((10, 20, 45), (30, 60, 70))  # (z, y, x) from, to: crosses a slab border at x = 64
    labels[10:30, 20:60, 45:70] = 7
    renderer.labels_edited(labels, box)
    for x in (44, 45, 63, 64, 69, 70):
        assert np.array_equal(renderer.plane(labels, sagittal, x), sagittal.slice_of(labels, x)), x
    assert renderer.x_major.wait_until_built(120)
    for x in range(40, 75):
        assert np.array_equal(renderer.plane(labels, sagittal, x), sagittal.slice_of(labels, x)), x
    assert (renderer.plane(labels, sagittal, 50) == 7).sum() == 20 * 40


def test_a_changing_preview_and_an_over_budget_array_are_sliced_directly(ct, monkeypatch):
    """A preview being filled is never copied; once it has settled (the decoder filled it in place
    and it became the loaded volume, the same array) it is copied like any other. An array over
    the budget, or over MAX_COPIED_BYTES, is sliced directly."""
    import medseg.gui.viewer.slice_render as slice_render

    direction, values, _ = ct
    sagittal = view_axes("sagittal", np.eye(3))
    renderer = SliceRenderer()
    preview = values.copy()
    renderer.changing(preview)
    renderer.plane(preview, sagittal, 3)
    assert renderer.x_major.wait_until_built(120)
    assert np.shares_memory(renderer.plane(preview, sagittal, 3), preview)  # still sliced: no copy was made
    renderer.settled(preview)
    renderer.plane(preview, sagittal, 3)
    assert renderer.x_major.wait_until_built(120)
    assert not np.shares_memory(renderer.plane(preview, sagittal, 3), preview)  # now read from its copy
    small = SliceRenderer(copy_budget_bytes=values.nbytes - 1)
    monkeypatch.setattr(slice_render, "MAX_COPIED_BYTES", values.nbytes - 1)
    large = SliceRenderer()
    for renderer in (small, large):
        for x in (0, SLAB, values.shape[2] - 1):
            assert np.array_equal(renderer.plane(values, sagittal, x), sagittal.slice_of(values, x))
        assert renderer.x_major.wait_until_built(120)
        for x in (0, SLAB, values.shape[2] - 1):  # nothing was copied: every plane is still the array's own
            assert np.shares_memory(renderer.plane(values, sagittal, x), values)


def test_copies_of_replaced_arrays_are_dropped(ct):
    _, values, labels = ct
    sagittal = view_axes("sagittal", np.eye(3))
    renderer = SliceRenderer()
    for array in (values, labels, labels.copy(), labels.copy()):  # image, then three label maps in turn
        renderer.plane(array, sagittal, 1)
        renderer.plane(values, sagittal, 1)
    assert renderer.x_major.wait_until_built(120)
    # the image (read on every turn) keeps its copy; the first label map's was dropped for the later ones
    # (two copies are kept: the image and its label map), so its plane is sliced from it again
    assert not np.shares_memory(renderer.plane(values, sagittal, 1), values)
    assert np.shares_memory(renderer.plane(labels, sagittal, 1), labels)

