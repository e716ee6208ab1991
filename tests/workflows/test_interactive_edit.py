"""``medseg edit IMAGE -o OUT --prompt ...``: prompts refine one object, written into a label, and the result is
nnInteractive 2.6.0's own on the same checkpoint (the oracle: its inference session run here on the same
prompts). Every prompt is checked before anything runs.

The checkpoint is nnInteractive's layout with random weights (tests/model/interactive_fixture.py), small
for CI time (an 80^3 patch, 4 stages of 4..32 features, as the parity test); the image is the lung1 CT
cut around its tumour (32 x 96 x 96 voxels of the real series, its geometry kept), written as NRRD.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from interactive_fixture import make_nninteractive_folder

from medseg.cli import main as cli_main

PATCH, FEATURES = 80, 4
CROP_XYZ = ((170, 266), (312, 408), (16, 48))  # lung1 around the tumour, as SimpleITK indexes (x, y, z)


@pytest.fixture(scope="module")
def case(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("interactive_edit")
    folder = make_nninteractive_folder(root, patch_size=(PATCH,) * 3, base_features=FEATURES,
                                       max_features=8 * FEATURES)
    lung = shared_data / "ct" / "pyradiomics_lung1"
    (x0, x1), (y0, y1), (z0, z1) = CROP_XYZ
    image = sitk.ReadImage(str(lung / "lung1_image.nrrd"))[x0:x1, y0:y1, z0:z1]
    tumour = sitk.GetArrayFromImage(sitk.ReadImage(str(lung / "lung1_label.nrrd"))[x0:x1, y0:y1, z0:z1])
    sitk.WriteImage(image, str(root / "crop.nrrd"))
    z, y, x = (int(round(c.mean())) for c in np.nonzero(tumour))
    scribble = np.zeros(tumour.shape, np.uint8)
    scribble[z - 1, y - 8:y + 9, x - 2:x] = 1  # a stroke two voxels wide, on the slice below the click
    mask = sitk.GetImageFromArray(scribble)
    mask.CopyInformation(image)
    sitk.WriteImage(mask, str(root / "scribble.nrrd"))

    def mm(zyx):
        return ",".join(f"{v:.4f}" for v in image.TransformIndexToPhysicalPoint(tuple(int(v) for v in zyx[::-1])))

    # a click and a scribble (the negative point and the other kinds: tests/model/test_interactive_parity.py)
    prompts = [("point", [z, y, x], True), ("scribble", scribble, True)]
    texts = [f"point:{mm([z, y, x])}", f"scribble:{root / 'scribble.nrrd'}"]
    return root, folder, sitk.GetArrayFromImage(image), prompts, texts


def _nninteractive(folder, image, prompts):
    from nnInteractive.inference.inference_session import nnInteractiveInferenceSession

    peer = nnInteractiveInferenceSession(device=torch.device("cpu"), torch_n_threads=torch.get_num_threads())
    peer.initialize_from_trained_model_folder(str(folder))
    peer.set_image(image[None])
    target = np.zeros(image.shape, np.uint8)
    peer.set_target_buffer(target)
    for kind, argument, positive in prompts:
        np.random.seed(0)  # nnInteractive's unseeded refinement fallback; medseg seeds its own with 0
        if kind == "point":
            peer.add_point_interaction(argument, positive)
        else:
            peer.add_scribble_interaction(argument, positive)
    return target


def test_prompts_on_the_command_line_give_nninteractives_object(case, capsys):
    root, folder, image, prompts, texts = case
    out = root / "out.nii.gz"
    args = ["edit", str(root / "crop.nrrd"), "-o", str(out), "--interactive-model", str(folder),
            "--prompt-label", "2"]
    for text in texts:
        args += ["--prompt", text]
    assert cli_main(args) == 0
    printed = capsys.readouterr()
    assert "interactive runtime: torch" in printed.err  # an nnInteractive folder has no measured choice: torch
    assert "exact: nnInteractive's 80^3 patch" in printed.err  # the small first patch is off by default
    labels = sitk.GetArrayFromImage(sitk.ReadImage(str(out)))
    assert set(np.unique(labels)) <= {0, 2}
    mine = labels == 2
    theirs = _nninteractive(folder, image, prompts).astype(bool)
    agreement = float((mine == theirs).mean())
    dice = 2 * (mine & theirs).sum() / (mine.sum() + theirs.sum())
    assert 0.001 < mine.mean() < 0.9, "the object is empty or everything: the comparison would say nothing"
    assert agreement >= 0.999 and dice >= 0.99, (agreement, dice)


@pytest.mark.parametrize("text, message", [
    ("point:1e6,0,0", "outside the image"),  # the syntax's refusals: tests/model/test_interactive_prompt_spec.py
    ("box:-20,-120,-600,-10,-110,-590", "drawn on one slice"),
    ("scribble:{root}/missing.nrrd", "does not exist"),
])
def test_a_bad_prompt_is_refused_before_anything_runs(case, text, message, capsys):
    root, folder, _image, _prompts, texts = case
    out = root / "refused.nii.gz"
    args = ["edit", str(root / "crop.nrrd"), "-o", str(out), "--interactive-model", str(folder),
            "--prompt", texts[0], "--prompt", text.format(root=root)]
    assert cli_main(args) != 0
    error = capsys.readouterr().err
    assert message in error and f"--prompt {text.format(root=root)}" in error  # names the prompt it refuses
    assert "interactive runtime" not in error  # refused before the model ran the first, good prompt
    assert not out.exists()


def test_a_bad_interactive_mode_is_refused_before_anything_runs(case, capsys):
    root, folder, _image, _prompts, texts = case
    out = root / "bad-mode.nii.gz"
    args = ["edit", str(root / "crop.nrrd"), "-o", str(out), "--interactive-model", str(folder),
            "--prompt", texts[0], "--interactive-mode", "fast"]
    assert cli_main(args) != 0
    error = capsys.readouterr().err
    assert "--interactive-mode must be one of exact, small-first, not 'fast'" in error
    assert "interactive runtime" not in error  # the model never ran
    assert not out.exists()


def test_small_first_on_the_command_line_says_which_patches_ran(case, capsys):
    """The random-weights network's object reaches the half patch's faces, so the command falls back to the exact
    path (that the fallback then writes the exact object bit for bit: tests/model/test_interactive_small_first.py)."""
    root, folder, _image, _prompts, texts = case
    out = root / "small-first.nii.gz"
    assert cli_main(["edit", str(root / "crop.nrrd"), "-o", str(out), "--interactive-model", str(folder),
                     "--prompt", texts[0], "--interactive-mode", "small-first"]) == 0
    printed = capsys.readouterr().err
    assert "small first patch: 40^3" in printed  # half the 80^3 patch, on the network's stride of 8
    assert "prompt 1: small patch, then exact (first pass 40x40x40" in printed
    assert (sitk.GetArrayFromImage(sitk.ReadImage(str(out))) == 1).any()


def test_each_prompts_cost_is_said_before_it_runs_and_each_pass_as_it_starts(case, capsys):
    """The first prompt's cost is unknown on a folder with no calibration record (it says so); the second's comes
    from the passes the first one ran. Each is said before its first pass starts, and every pass is announced."""
    root, folder, _image, _prompts, texts = case
    out = root / "cost.nii.gz"
    assert cli_main(["edit", str(root / "crop.nrrd"), "-o", str(out), "--interactive-model", str(folder),
                     "--prompt", texts[0], "--prompt", texts[1]]) == 0
    err = capsys.readouterr().err
    first = err.index("note: prompt 1 (point): 1 network pass; more if the object reaches past the patch; the time of "
                      "a pass is not measured on this computer yet")
    assert first < err.index("note: prompt 1 (point), pass 1 of ")
    second = re.search(r"note: prompt 2 \(scribble\): about ([\d.]+) s on this computer \(1 network pass of about "
                       r"([\d.]+) s, as the last pass took", err)
    assert second is not None, err
    assert err.index("note: prompt 1 (point), pass 1 of ") < second.start() < err.index("note: prompt 2 (scribble), pass 1 of ")
    passes = re.findall(r"note: prompt 1 \(point\), pass (\d+) of ", err)
    assert passes == [str(n) for n in range(1, len(passes) + 1)]  # every pass, in order


def test_a_box_whose_corners_are_one_voxel_is_refused(case, capsys):
    """nnInteractive would take it as a 1 x 1 x 1 box: said, before anything runs."""
    root, folder, _image, _prompts, texts = case
    corner = texts[0].split(":", 1)[1]
    out = root / "one-voxel-box.nii.gz"
    assert cli_main(["edit", str(root / "crop.nrrd"), "-o", str(out), "--interactive-model", str(folder),
                     "--prompt", f"box:{corner},{corner}"]) != 0
    error = capsys.readouterr().err
    assert f"--prompt box:{corner},{corner}" in error
    assert "the box's two corners fall in the same voxel" in error and "point:X,Y,Z" in error
    assert "interactive runtime" not in error and not out.exists()
