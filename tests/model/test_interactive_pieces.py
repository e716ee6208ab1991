"""The parts of medseg's interactive session, each against nnInteractive 2.6.0's own function or state.

* prompt channels: many prompts (points, boxes, scribbles, lassos; enough for nnInteractive's
  float16 rescaling to happen) drawn by nnInteractive's session without predicting, against
  medseg's stamps rendered over the whole image: the same values to the bit;
* the refinement patches: nnInteractive's greedy cover (generate_bounding_boxes) on real changes,
  its random fallback seeded as medseg seeds it;
* the point ball, the dilation before zooming out, the opening of the changed region;
* the session's own contract: a failed or undone prompt leaves it as it was, bad prompts are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from interactive_fixture import make_nninteractive_folder

from medseg.model.interactive.model_files import import_nninteractive
from medseg.model.interactive.prompt_outcome import PromptError
from medseg.model.interactive.prompts import PromptStore, point_stamp
from medseg.model.interactive.refine_boxes import changed_region, cover_boxes
from medseg.model.interactive.resize import dilate
from medseg.model.interactive.session import InteractiveSession

TINY = {"patch_size": (56, 56, 56), "n_stages": 3, "base_features": 4, "max_features": 16, "configuration": "3d_ps56"}


@pytest.fixture(scope="module")
def lung_crop(shared_data):
    image = sitk.GetArrayFromImage(sitk.ReadImage(str(shared_data / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd")))
    return image[20:44, 320:400, 180:260].copy()  # (24, 80, 80) around the tumour


@pytest.mark.parametrize("radius", [2, 4, 6])
def test_point_ball(radius):
    from nnInteractive.interaction.point import build_point

    assert torch.equal(point_stamp(radius), build_point((radius,) * 3, True, False))


def test_prompt_channels_bit_for_bit(tmp_path, lung_crop):
    """130 prompts with decay 0.9 (a legacy bare-name session file) pass float16's maximum: rescaled."""
    from nnInteractive.inference.inference_session import nnInteractiveInferenceSession

    folder = make_nninteractive_folder(tmp_path, **TINY, session_file="nnInteractiveInferenceSessionV2")
    peer = nnInteractiveInferenceSession(device=torch.device("cpu"), torch_n_threads=1, enable_undo=False)
    peer.initialize_from_trained_model_folder(str(folder))
    peer.set_image(lung_crop[None])
    settings = import_nninteractive(folder).settings
    store = PromptStore(lung_crop.shape, settings.prompt_channels, settings.decay)
    rng = np.random.default_rng(3)
    shape = lung_crop.shape
    for index in range(130):
        kind = ("points", "bbox2d", "scribble", "lasso")[index % 4]
        positive = bool(rng.integers(2))
        channel = settings.pair(kind)[0 if positive else 1]
        store.next_intensity()
        if kind == "points":
            centre = [int(rng.integers(-2, s + 2)) for s in shape]  # some reach past the image
            peer.add_point_interaction(centre, positive, run_prediction=False)
            store.add_point(channel, centre, settings.point_radius)
        elif kind == "bbox2d":
            z = int(rng.integers(shape[0]))
            y0, x0 = (int(rng.integers(s - 10)) for s in shape[1:])
            box = [[z, z + 1], [y0, y0 + int(rng.integers(1, 10))], [x0, x0 + int(rng.integers(1, 10))]]
            peer.add_bbox_interaction(box, positive, run_prediction=False)
            store.add_box(channel, box)
        else:
            mask = (rng.random((2, 9, 9)) < 0.3).astype(np.uint8)
            mask[0, 4, 4] = 1
            origin = [int(rng.integers(s - n + 1)) for s, n in zip(shape, mask.shape)]
            full = np.zeros(shape, np.uint8)
            full[tuple(slice(o, o + n) for o, n in zip(origin, mask.shape))] = mask
            method = peer.add_scribble_interaction if kind == "scribble" else peer.add_lasso_interaction
            method(full, positive, run_prediction=False)
            store.add_mask(channel, mask, origin)
    assert store.intensity == peer.current_interaction_intensity
    assert store.intensity < 0.9 ** -130  # the rescaling happened
    whole = [[0, s] for s in shape]
    for channel in range(settings.prompt_channels):
        if channel == settings.previous_channel:
            continue
        assert torch.equal(store.render(channel, whole), peer.interactions[channel]), f"channel {channel}"


def _blobs(seed, shape=(40, 70, 70), count=4):
    rng = np.random.default_rng(seed)
    mask = np.zeros(shape, np.uint8)
    grid = np.indices(shape)
    for _ in range(count):
        centre = [rng.integers(s) for s in shape]
        radii = rng.integers(3, 14, size=3)
        mask |= (sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre, radii)) <= 1).astype(np.uint8)
    return mask


@pytest.mark.parametrize("seed", range(6))
def test_refinement_patches(seed):
    from nnInteractive.utils.bboxes import generate_bounding_boxes

    changed = changed_region(_blobs(seed), np.zeros((40, 70, 70), np.uint8))
    assert changed.any()
    for patch in ((56, 56, 56), (64, 64, 64)):
        np.random.seed(seed)
        expected = generate_bounding_boxes(torch.from_numpy(changed), patch, stride="auto", margin=(24, 24, 24),
                                           max_depth=3)
        assert cover_boxes(changed, patch, seed) == expected


def test_refinement_random_fallback_is_seeded():
    """Thin scattered changes leave voxels no grid centre covers: the random fallback runs."""
    from nnInteractive.utils.bboxes import generate_bounding_boxes

    region = np.zeros((30, 90, 90), np.uint8)
    region[5, 2:88:7, 3] = 1
    region[25, 80, 2:88:9] = 1
    region[14, 40:45, 40:45] = 1
    patches = []
    for seed in (11, 11, 12):
        np.random.seed(seed)
        expected = generate_bounding_boxes(torch.from_numpy(region), (56, 56, 56), stride="auto",
                                           margin=(24, 24, 24), max_depth=3)
        patches.append(cover_boxes(region, (56, 56, 56), seed))
        assert patches[-1] == expected
    assert patches[0] == patches[1] != patches[2]


@pytest.mark.parametrize("width", [3, 5, 7])
def test_dilation_before_zooming_out(width):
    from nnInteractive.utils.erosion_dilation import iterative_3x3_same_padding_pool3d

    rng = np.random.default_rng(width)
    values = torch.zeros(30, 40, 50, dtype=torch.float16)
    values[rng.integers(30, size=20), rng.integers(40, size=20), rng.integers(50, size=20)] = torch.from_numpy(
        rng.random(20).astype(np.float16))
    values[0, 0, 0] = 0.75  # at the border: the window is clipped there
    expected = iterative_3x3_same_padding_pool3d(values[None, None], width)[0, 0]
    assert torch.equal(dilate(values, width), expected)


def test_opening_of_the_changed_region():
    from nnInteractive.utils.erosion_dilation import iterative_3x3_same_padding_pool3d

    answer, previous = _blobs(7), _blobs(8)
    diff = torch.from_numpy((answer != previous).astype(np.float16))[None, None]
    opened = iterative_3x3_same_padding_pool3d(iterative_3x3_same_padding_pool3d(diff, 5, use_min_pool=True), 5)
    assert np.array_equal(changed_region(answer, previous), opened[0, 0].numpy().astype(np.uint8))


# --- the session's contract -------------------------------------------------------------------
@pytest.fixture(scope="module")
def session(tmp_path_factory, lung_crop):
    folder = make_nninteractive_folder(tmp_path_factory.mktemp("tiny"), **TINY, seed=2)
    # without zooming out every point is one forward pass (the zoom-out is the parity test's)
    session = InteractiveSession(import_nninteractive(folder), "cpu", autozoom=False)
    session.set_image(lung_crop)
    return session


def test_undo_restores_object_and_prompts(session):
    session.new_object()
    session.add_point((12, 40, 40))
    before, prompts = session.mask.copy(), session.prompt_count
    session.add_point((12, 44, 36), positive=False)
    assert session.prompt_count == prompts + 1
    assert session.undo() is True
    assert np.array_equal(session.mask, before) and session.prompt_count == prompts
    assert session.undo() is False  # one level, as nnInteractive
    # the prompt after an undo sees what it would have seen without the undone one
    again = session.add_point((12, 44, 36), positive=False).changed
    repeat = session.mask.copy()
    session.undo()
    session.add_point((12, 44, 36), positive=False)
    assert again is not None and np.array_equal(session.mask, repeat)


def test_failed_prompt_leaves_the_session_as_it_was(tmp_path, lung_crop):
    model = import_nninteractive(make_nninteractive_folder(tmp_path, **TINY, seed=2))
    network = model.build_network()
    failing = {"now": False}

    def runner(inputs):
        if failing["now"]:
            raise RuntimeError("out of memory")
        with torch.inference_mode():
            return network(inputs)

    session = InteractiveSession(model, runner=runner, autozoom=False)
    session.set_image(lung_crop)
    session.add_point((12, 40, 40))
    before, prompts = session.mask.copy(), session.prompt_count
    failing["now"] = True
    with pytest.raises(RuntimeError, match="out of memory"):
        session.add_point((12, 30, 30))
    assert np.array_equal(session.mask, before) and session.prompt_count == prompts
    failing["now"] = False
    session.add_point((12, 30, 30))  # and it goes on from there
    assert session.prompt_count == prompts + 1


def test_bad_prompts_are_refused_before_anything_runs(session):
    session.new_object()
    with pytest.raises(PromptError, match="outside the image"):
        session.add_point((30, 40, 40))
    with pytest.raises(PromptError, match="one slice"):
        session.add_box([[10, 14], [30, 50], [30, 50]])
    with pytest.raises(PromptError, match="no extent"):
        session.add_box([[10, 10], [30, 50], [30, 50]])
    with pytest.raises(PromptError, match="empty"):
        session.add_scribble(np.zeros((1, 5, 5), np.uint8), (3, 3, 3))
    with pytest.raises(PromptError, match="outside the image"):
        session.add_lasso(np.ones((1, 5, 5), np.uint8), (3, 78, 3))
    assert session.prompt_count == 0 and not session.mask.any()
