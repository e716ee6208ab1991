"""The interactive session's small first patch (``small_first=True``, off by default): a small prompt runs on half
the patch, and a prompt whose answer reaches that half patch's faces falls back to the exact path unchanged.

Two networks. The patch-size question is asked of a *local* model (a runner whose object is the positive
click's ball grown by a fixed number of voxels, whatever the patch around it): its answer does not depend on the
patch, so the small patch, when kept, must give exactly the exact mode's object, and whether the object reaches
the half patch's faces is known from its size. The fallback is run on the random-weights network in
nnInteractive's layout that the parity test uses (tests/model/interactive_fixture.py, an 80^3 patch: the half
patch is 40^3, a multiple of its total stride 8), on the lung1 CT around its tumour: its answer reaches the faces,
so the small-first session must end with the exact session's object, bit for bit, after paying one more pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interactive_fixture import lung1_tumour_crop, make_nninteractive_folder

from medseg.model.interactive.model_files import import_nninteractive
from medseg.model.interactive.patch_geometry import small_patch_for
from medseg.model.interactive.prompt_outcome import EXACT, SMALL, SMALL_THEN_EXACT
from medseg.model.interactive.session import InteractiveSession

PATCH, FEATURES = 80, 4


@pytest.fixture(scope="module")
def case(tmp_path_factory, shared_data):
    folder = make_nninteractive_folder(tmp_path_factory.mktemp("small_first"), patch_size=(PATCH,) * 3,
                                       base_features=FEATURES, max_features=8 * FEATURES)
    return (import_nninteractive(folder), *lung1_tumour_crop(shared_data))


def local_model(model, grow: int):
    """A runner whose object is the positive point channel grown by ``grow`` voxels (a cube), plus the previous
    answer: the same object whatever patch it is given."""
    point = 1 + model.settings.pair("points")[0]  # input channel 0 is the image
    previous = 1 + model.settings.previous_channel

    def run(batch: torch.Tensor) -> torch.Tensor:
        clicked = (batch[:, point:point + 1] > 0).float()
        grown = clicked
        for axis in range(3):  # a cube, one axis at a time
            size = [1, 1, 1]
            size[axis] = 2 * grow + 1
            grown = torch.nn.functional.max_pool3d(grown, size, stride=1, padding=[s // 2 for s in size])
        grown = grown[:, 0]
        obj = torch.maximum(grown, (batch[:, previous] > 0).float())
        return torch.stack((0.5 - obj, obj - 0.5), 1)

    return run


def _sessions(model, image, runner=None):
    exact = InteractiveSession(model, "cpu", runner=runner)
    small = InteractiveSession(model, "cpu", runner=runner, small_first=True)
    for session in (exact, small):
        session.set_image(image)
    return exact, small


def test_the_half_patch_keeps_to_the_networks_stride():
    assert small_patch_for((192, 192, 192), (32, 32, 32)) == (96, 96, 96)  # nnInteractive's ResEnc-L
    assert small_patch_for((80, 80, 80), (8, 8, 8)) == (40, 40, 40)
    assert small_patch_for((80, 160, 160), (16, 32, 32)) == (48, 96, 96)  # rounded up to the stride
    assert small_patch_for((32, 32, 32), (32, 32, 32)) is None  # nothing smaller fits the stride


def test_off_by_default(case):
    model, image, centre = case
    session = InteractiveSession(model, "cpu", runner=local_model(model, 3))
    session.set_image(image)
    result = session.add_point(centre)
    assert not session.small_first
    assert (result.mode, result.first_patch, result.passes) == (EXACT, (PATCH,) * 3, 1)
    assert session.mode_text.startswith("exact")


def test_a_small_object_is_answered_on_the_half_patch_alone(case):
    model, image, centre = case
    exact, small = _sessions(model, image, local_model(model, 3))
    assert small.small_patch == (40, 40, 40) and "40^3" in small.mode_text
    for step, (point, positive) in enumerate([(centre, True), ([centre[0], centre[1] + 3, centre[2] - 2], True)]):
        wanted = exact.add_point(point, positive)
        got = small.add_point(point, positive)
        assert (wanted.mode, wanted.first_patch) == (EXACT, (PATCH,) * 3)
        assert (got.mode, got.first_patch, got.passes) == (SMALL, (40, 40, 40), 1), step
        np.testing.assert_array_equal(small.mask, exact.mask)
    # the object: the two balls of radius 4 grown by 3 voxels, nothing else
    assert 0 < small.mask.sum() < 2 * 15**3
    # Undo takes the small patch's prompt back as any other
    assert small.undo()
    assert exact.undo()
    np.testing.assert_array_equal(small.mask, exact.mask)


def test_a_prompt_too_large_for_the_half_patch_never_runs_it(case):
    model, image, centre = case
    exact, small = _sessions(model, image, local_model(model, 3))
    z, y, x = centre
    box = [[z, z + 1], [y - 15, y + 15], [x - 15, x + 15]]  # 30 voxels + a third of 40 is more than 40
    got = small.add_box(box)
    exact.add_box(box)
    assert (got.mode, got.first_patch, got.passes) == (EXACT, (PATCH,) * 3, 1)
    np.testing.assert_array_equal(small.mask, exact.mask)


def test_an_object_reaching_the_half_patchs_faces_falls_back_to_the_exact_path(case):
    model, image, centre = case
    exact, small = _sessions(model, image, local_model(model, 21))  # 4 + 21 voxels from the click: past 40 / 2
    wanted, got = exact.add_point(centre), small.add_point(centre)
    assert (got.mode, got.first_patch, got.passes) == (SMALL_THEN_EXACT, (40, 40, 40), wanted.passes + 1)
    np.testing.assert_array_equal(small.mask, exact.mask)
    # the object now reaches past the half patch: the next prompt goes straight to the exact path
    point = [centre[0], centre[1] + 2, centre[2]]
    wanted, got = exact.add_point(point), small.add_point(point)
    assert (got.mode, got.passes) == (EXACT, wanted.passes)
    np.testing.assert_array_equal(small.mask, exact.mask)


def test_the_real_networks_fallback_gives_the_exact_object(case):
    """The random-weights network's first answer reaches the half patch's faces (as it reaches the full patch's:
    the exact path then zooms out and refines); the small-first session ends with the exact object, bit for bit."""
    model, image, centre = case
    exact, small = _sessions(model, image)
    wanted, got = exact.add_point(centre), small.add_point(centre)
    assert got.mode == SMALL_THEN_EXACT and got.passes == wanted.passes + 1
    assert got.zoom == wanted.zoom > 1
    assert 0.001 < exact.mask.mean() < 0.9  # neither empty nor everything: the comparison says something
    np.testing.assert_array_equal(small.mask, exact.mask)
