"""What the hostile-input probe still met (issue 53, item 5), each through the real command in its own
process: a NIfTI whose only transform, the qform, is not a number; a model.json naming a fold or an
ONNX file with ".."; ``--device ""``; ``--threads 100000``; empty input and output paths; a NIfTI
sform spacing of 1e30 or 1e-30 mm; a 255-byte label map name whose sidecar would be 260. Every
refusal names the file or the argument, the figure, and what to do."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from probes import run_medseg

from medseg.model.package import starter_model_path


@pytest.fixture(scope="module")
def clean(ct_dir: Path, tmp_path_factory) -> Path:
    """Four slices of the real abdomen CT as an uncompressed NIfTI-1 with its sform (ITK's writing)."""
    path = tmp_path_factory.mktemp("clean") / "clean.nii"
    sitk.WriteImage(sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"))[:, :, 10:14], str(path))
    return path


def _patched(clean: Path, target: Path, edits: list[tuple[int, str, tuple]]) -> Path:
    data = bytearray(clean.read_bytes())
    for offset, fmt, values in edits:
        struct.pack_into(fmt, data, offset, *values)
    target.write_bytes(bytes(data))
    return target


# --- the NIfTI headers ---------------------------------------------------------------------------------------
def test_a_nifti_whose_qform_is_not_a_number_is_read_with_a_finding(clean: Path, tmp_path: Path) -> None:
    nan = float("nan")
    path = _patched(clean, tmp_path / "qform_nan.nii", [(252, "<hh", (1, 0)), (256, "<3f", (nan, nan, nan))])
    run = run_medseg("convert", "--quiet", path, tmp_path / "out.nii.gz")
    assert run.returncode == 0, run.stderr
    assert "finding [orientation_unusable]" in run.stderr and "quatern_b = nan" in run.stderr
    assert "Check the orientation" in run.stderr
    info = run_medseg("info", path, "--json")
    assert info.returncode == 0, info.stderr
    assert "orientation_unusable" in info.stdout
    # with a spacing to replace (medseg's own NIfTI reader, not ITK's), the same axes and the same finding
    zero = _patched(path, tmp_path / "qform_nan_zero_spacing.nii", [(80, "<f", (0.0,))])
    given = run_medseg("convert", "--quiet", zero, tmp_path / "given.nii.gz", "--spacing", "3", "3", "3")
    assert given.returncode == 0, given.stderr
    assert "finding [orientation_unusable]" in given.stderr
    first, second = (sitk.ReadImage(str(tmp_path / name)) for name in ("out.nii.gz", "given.nii.gz"))
    np.testing.assert_allclose(first.GetDirection(), second.GetDirection())
    np.testing.assert_allclose(first.GetOrigin(), second.GetOrigin(), atol=1e-4)


@pytest.mark.parametrize("value", [1e30, 1e-30])
def test_an_absurd_sform_spacing_is_named_with_its_value_not_itks_direction_error(clean: Path, tmp_path: Path,
                                                                                value: float) -> None:
    srow_x = struct.unpack("<4f", clean.read_bytes()[280:296])
    assert struct.unpack("<h", clean.read_bytes()[254:256])[0] > 0  # the sform is the transform read
    path = _patched(clean, tmp_path / "absurd.nii", [(80, "<f", (value,)),
                                                    (280, "<4f", (srow_x[0] * value / 3.0, *srow_x[1:]))])
    for command in (["convert", "--quiet", path, tmp_path / "out.nii.gz"], ["segment", path, "-o", tmp_path / "s.nii.gz"]):
        run = run_medseg(*command)
        assert run.returncode == 1, run.stderr
        assert f"{value:g} mm along x" in run.stderr and "absurd.nii" in run.stderr, run.stderr
        assert "--spacing X Y Z" in run.stderr and "orthonormal" not in run.stderr
    info = run_medseg("info", path)
    assert info.returncode == 0 and "finding [absurd_spacing]" in info.stdout, info.stdout + info.stderr
    # the way out the message gives works: the voxels and geometry of the clean file, at the given spacing
    given = run_medseg("convert", "--quiet", path, tmp_path / "given.nii.gz", "--spacing", "3", "3", "3")
    assert given.returncode == 0, given.stderr
    out, reference = sitk.ReadImage(str(tmp_path / "given.nii.gz")), sitk.ReadImage(str(clean))
    np.testing.assert_array_equal(sitk.GetArrayFromImage(out), sitk.GetArrayFromImage(reference))
    np.testing.assert_allclose(out.GetSpacing(), reference.GetSpacing())
    np.testing.assert_allclose(out.GetDirection(), reference.GetDirection(), atol=1e-6)


# --- the model package -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["folds", "onnx"])
def test_a_model_json_naming_a_path_with_dotdot_is_refused_by_its_field(three_slices: Path, tmp_path: Path,
                                                                         field: str) -> None:
    package = tmp_path / "model"
    shutil.copytree(starter_model_path(), package)
    manifest = json.loads((package / "model.json").read_text())
    config = next(iter(manifest["folds"]))
    if field == "folds":
        manifest["folds"][config] = ["../fold_0", *manifest["folds"][config][1:]]
        named = f"folds['{config}'] lists '../fold_0'"
    else:
        (tmp_path / "outside.onnx").write_bytes(b"not a network")
        manifest["onnx"] = {config: "../outside.onnx"}
        named = f"onnx['{config}'] names '../outside.onnx'"
    (package / "model.json").write_text(json.dumps(manifest))
    run = run_medseg("segment", three_slices, "--model", package, "-o", tmp_path / "seg.nii.gz")
    assert run.returncode == 1, run.stderr
    assert named in run.stderr and "model.json" in run.stderr and "not a plain" in run.stderr, run.stderr
    assert "reinstall the model" in run.stderr
    assert not (tmp_path / "seg.nii.gz").exists()


# --- arguments -------------------------------------------------------------------------------------------------
def test_an_empty_device_is_refused(three_slices: Path, tmp_path: Path) -> None:
    for command in (["segment", three_slices, "-o", tmp_path / "s.nii.gz"], ["evaluate", "starter", tmp_path]):
        run = run_medseg(*command, "--device", "")
        assert run.returncode == 2, run.stderr
        assert "argument --device: the device name is empty" in run.stderr and "medseg devices" in run.stderr
    assert not (tmp_path / "s.nii.gz").exists()


def test_an_absurd_thread_count_says_how_many_cores_there_are(three_slices: Path, tmp_path: Path) -> None:
    from medseg import threads

    for command in (["segment", three_slices, "-o", tmp_path / "s.nii.gz"], ["batch", three_slices, "-o", tmp_path / "b"]):
        run = run_medseg(*command, "--threads", "100000")
        assert run.returncode == 2, run.stderr
        assert "100000 is far more threads than this machine can run" in run.stderr, run.stderr
        assert f"it has {os.cpu_count()} logical CPUs" in run.stderr
        assert f"give at most {threads.most_threads()}" in run.stderr and "GiB" not in run.stderr
    assert not (tmp_path / "s.nii.gz").exists()
    # and as many as the machine has is taken
    assert threads.too_many(os.cpu_count() or 1) == ""


def test_the_library_refuses_the_same_count_for_callers_without_a_command_line() -> None:
    from medseg import threads
    from medseg.errors import MedsegError

    before = threads.budget_count()
    with pytest.raises(MedsegError, match="100000 is far more threads"):
        threads.configure(100000, threads.FROM_SETTING)
    assert threads.budget_count() == before


@pytest.mark.parametrize("command, named", [
    (["segment", "", "-o", "{tmp}/s.nii.gz"], "PATH is an empty path: no file or folder was named"),
    (["info", ""], "PATH is an empty path"),
    (["batch", "", "-o", "{tmp}/b"], "INPUT is an empty path"),
    (["evaluate", "starter", ""], "DATASET is an empty path"),
    (["export", "starter", "--format", "onnx", "-o", ""], "no output given (-o/--output is an empty path)"),
    (["mesh", "{tmp}/s.nii.gz", "--image", "{ct}", "-o", ""], "no output given (-o/--output is an empty path)"),
])
def test_an_empty_path_is_said_to_be_empty(three_slices: Path, tmp_path: Path, command, named) -> None:
    argv = [part.format(tmp=tmp_path, ct=three_slices) for part in command]
    # run in an empty folder (what "." would have been), with this checkout's medseg
    run = run_medseg(*argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert run.returncode == 1, run.stderr
    assert named in run.stderr, run.stderr
    assert "medseg: error: .:" not in run.stderr and "Device or resource busy" not in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written in the working folder


def test_a_label_map_name_whose_sidecar_is_too_long_says_so(three_slices: Path, tmp_path: Path) -> None:
    name = "s" * 248 + ".nii.gz"  # 255 bytes: legal; its sidecar s...s.labels.json is 260
    run = run_medseg("segment", three_slices, "-o", tmp_path / name)
    assert run.returncode == 1, run.stderr
    assert "the output's name is 255 bytes long, and its sidecar" in run.stderr, run.stderr
    assert "would be 260 bytes long; this file system allows 255" in run.stderr
    assert "at most 250 bytes" in run.stderr
    shorter = "s" * 243 + ".nii.gz"  # the 250 bytes the message offers
    done = run_medseg("segment", three_slices, "-o", tmp_path / shorter)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / shorter).is_file() and (tmp_path / ("s" * 243 + ".labels.json")).is_file()
