"""Prompts in patient mm (LPS) placed on the real lung1 CT, and refused before anything runs.

Oracle for the geometry: SimpleITK's TransformPhysicalPointToContinuousIndex on the same file.
"""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.core.volume import Volume
from medseg.io import load
from medseg.model.interactive.prompt_outcome import PromptError
from medseg.model.interactive.prompt_spec import parse_prompt, resolve_prompt


@pytest.fixture(scope="module")
def lung(shared_data):
    path = shared_data / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd"
    return load(path), sitk.ReadImage(str(path))


def test_point_in_mm_lands_on_the_voxel_simpleitk_finds(lung):
    volume, reference = lung
    mm = (-45.3, -120.8, -612.5)
    spec = parse_prompt("point:%g,%g,%g" % mm)
    assert spec.kind == "point" and spec.positive
    prompt = resolve_prompt(spec, volume)
    x, y, z = reference.TransformPhysicalPointToContinuousIndex(mm)
    assert prompt.point == pytest.approx((z, y, x), abs=1e-6)
    assert not resolve_prompt(parse_prompt("point:%g,%g,%g:neg" % mm), volume).positive


def test_box_on_one_slice(lung):
    volume, reference = lung
    corners = ((-60.0, -140.0, -612.5), (-20.0, -100.0, -612.5))
    prompt = resolve_prompt(parse_prompt("box:" + ",".join("%g" % v for c in corners for v in c)), volume)
    indices = [reference.TransformPhysicalPointToIndex(c) for c in corners]  # (x, y, z), nearest voxel
    assert prompt.box == [[indices[0][2], indices[0][2] + 1], [indices[0][1], indices[1][1] + 1],
                          [indices[0][0], indices[1][0] + 1]]


@pytest.mark.parametrize("text, message", [
    ("click:1,2,3", "expected one of"),
    ("point:1,2", "3 finite numbers"),
    ("point:1,2,nan", "3 finite numbers"),
    ("point:a,b,c", "numbers separated by commas"),
    ("box:1,2,3,4,5", "6 finite numbers"),
    ("scribble:", "expected one of"),
])
def test_syntax_errors(text, message):
    with pytest.raises(PromptError, match=message):
        parse_prompt(text)


def test_prompts_outside_or_3d_are_refused(lung):
    volume, _ = lung
    with pytest.raises(PromptError, match="outside the image.*image spans x"):
        resolve_prompt(parse_prompt("point:0,0,0"), volume)
    with pytest.raises(PromptError, match="one slice"):
        resolve_prompt(parse_prompt("box:-60,-140,-612.5,-20,-100,-600"), volume)


def test_scribble_mask_on_the_image_grid(lung, tmp_path):
    volume, _ = lung
    painted = np.zeros(volume.shape_zyx, np.uint8)
    painted[33, 350:353, 210:220] = 1
    spec = parse_prompt(f"scribble:{tmp_path / 'stroke.nrrd'}:neg")
    prompt = resolve_prompt(spec, volume, volume.with_array(painted))
    assert not prompt.positive and prompt.origin == (33, 350, 210) and prompt.mask.shape == (1, 3, 10)
    assert prompt.mask.all()
    with pytest.raises(PromptError, match="empty"):
        resolve_prompt(spec, volume, volume.with_array(np.zeros_like(painted)))
    shifted = Volume(painted, spacing_mm=volume.spacing_mm, origin_mm=(0.0, 0.0, 0.0), direction=volume.direction)
    with pytest.raises(PromptError, match="not on the image's grid") as error:
        resolve_prompt(spec, volume, shifted)
    assert error.value.path.name == "stroke.nrrd"


def test_a_box_with_its_corners_in_one_voxel_or_on_one_line_is_refused(lung):
    """nnInteractive would take either as a box one voxel wide: never what a user meant."""
    volume, reference = lung
    corner = reference.TransformIndexToPhysicalPoint((210, 350, 33))  # a voxel's centre
    near = reference.TransformContinuousIndexToPhysicalPoint((210.2, 350.3, 33.1))  # inside the same voxel
    with pytest.raises(PromptError, match="two corners fall in the same voxel") as error:
        resolve_prompt(parse_prompt("box:" + ",".join("%r" % v for v in (*corner, *near))), volume)
    assert error.value.hint == "for a click, write point:X,Y,Z"
    along_x = (corner[0] + 30, corner[1], corner[2])  # the lung1 series is axial and untilted: x is one index axis
    with pytest.raises(PromptError, match="one voxel wide along two of the image's axes"):
        resolve_prompt(parse_prompt("box:" + ",".join("%g" % v for v in (*corner, *along_x))), volume)
