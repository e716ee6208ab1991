"""Arguments out of range and paths the file system refuses are errors in words, never tracebacks
(issue 43): ``--tile-batch -5``, ``plan --spacing 0 0 0``, ``train --lr nan``, ``--step 1e-6``, ``-o ''``,
names of 300 characters and paths of 5000; a legal 255-character name is written (its temporary
name stays within the limit)."""

from __future__ import annotations

import math

import pytest
import SimpleITK as sitk

from medseg.cli import main
from medseg.errors import ModelError
from medseg.model.tiling import check_step


def _usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["segment", "x", "-o", "s.nii.gz", "--tile-batch", "-5"], "argument --tile-batch: -5 is less than 1"),
    (["segment", "x", "-o", "s.nii.gz", "--step", "1e-6"], "argument --step: 1e-06 is outside 0.1–1"),
    (["segment", "x", "-o", "s.nii.gz", "--step", "nan"], "argument --step: nan is not a finite number"),
    (["segment", "x", "-o", "s.nii.gz", "--spacing", "0", "1", "1"], "argument --spacing: 0 must be more than 0"),
    (["plan", "--spacing", "0", "0", "0", "--shape", "30", "100", "100"], "argument --spacing: 0 is outside 0.05–50"),
    (["plan", "--spacing", "1", "1", "1", "--shape", "0", "100", "100"], "argument --shape: 0 is less than 1"),
    (["plan", "--spacing", "1", "1", "1", "--shape", "9", "9", "9", "--gpu-memory-gb", "nan"], "is not a finite"),
    (["train", "d", "--out", "m", "--lr", "nan"], "argument --lr: nan is not a finite number"),
    (["train", "d", "--out", "m", "--lr", "inf"], "argument --lr: inf is not a finite number"),
    (["train", "d", "--out", "m", "--lr", "-1"], "argument --lr: -1 must be more than 0"),
    (["train", "d", "--out", "m", "--batch-size", "0"], "argument --batch-size: 0 is less than 1"),
    (["train", "d", "--out", "m", "--epochs", "0"], "argument --epochs: 0 is less than 1"),
    (["train", "d", "--out", "m", "--target-spacing", "0", "0", "0"], "argument --target-spacing: 0 is outside"),
    (["batch", "in", "-o", "out", "--threads", "0"], "argument --threads: 0 is less than 1"),
])
def test_an_argument_out_of_range_is_a_usage_error(capsys, argv, said) -> None:
    assert said in _usage_error(capsys, argv)


def test_the_model_layer_refuses_the_same_for_callers_without_a_command_line() -> None:
    from medseg.model.planner import plan_from_fingerprint
    from medseg.model.training import TrainConfig

    with pytest.raises(ModelError, match="the tile step is 1e-06: it must be between 0.1 and 1"):
        check_step(1e-6)
    with pytest.raises(ModelError, match="a spacing of 0 x 0 x 0 mm cannot be planned for"):
        plan_from_fingerprint([[0.0, 0.0, 0.0]], [[30, 100, 100]])
    for bad in ({"learning_rate": math.nan}, {"learning_rate": math.inf}, {"batch_size": 0}, {"epochs": 0}):
        with pytest.raises(ModelError):
            TrainConfig(**bad)


def test_an_empty_output_is_said_to_be_missing(three_slices, capsys) -> None:
    assert main(["segment", str(three_slices), "-o", ""]) == 1
    assert "no output given (-o/--output is an empty path)" in capsys.readouterr().err
    assert main(["convert", str(three_slices), ""]) == 1
    assert "no output given (OUT is an empty path)" in capsys.readouterr().err


def test_names_and_paths_too_long_are_refused_in_words(three_slices, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["convert", str(three_slices), "n" * 293 + ".nii.gz"]) == 1
    err = capsys.readouterr().err
    assert "is 300 bytes long; this file system allows 255" in err and "Traceback" not in err
    assert main(["segment", str(three_slices), "-o", "s" * 293 + ".nii.gz"]) == 1
    assert "is 300 bytes long" in capsys.readouterr().err
    assert main(["convert", str(three_slices), "d/" * 2500 + "o.nii.gz"]) == 1
    assert "at most 4095 are allowed" in capsys.readouterr().err
    assert main(["info", "x" * 5000]) == 1
    assert "longer than this file system allows" in capsys.readouterr().err
    # a label map of 255 characters would need a sidecar of 260: said before any work
    assert main(["segment", str(three_slices), "-o", "s" * 248 + ".nii.gz"]) == 1
    assert "its sidecar (the label names and colours, written beside it)" in capsys.readouterr().err


def test_a_legal_255_character_name_is_written(three_slices, tmp_path, capsys) -> None:
    out = tmp_path / ("n" * 248 + ".nii.gz")
    assert len(out.name) == 255
    assert main(["convert", "--quiet", str(three_slices), str(out)]) == 0, capsys.readouterr().err
    assert sitk.ReadImage(str(out)).GetSize() == (512, 512, 3)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left behind


def test_a_temporary_name_stays_within_the_limit_and_is_cleaned_up_as_one(tmp_path) -> None:
    import os

    from medseg.io.atomic import clean_stale_temporaries, temporary_affixes

    prefix, suffix = temporary_affixes(tmp_path / ("n" * 248 + ".nii.gz"), ".nii.gz")
    left = tmp_path / (prefix + "abcdefgh" + suffix)  # what a killed writer would leave
    left.write_bytes(b"half a file")
    os.utime(left, (1, 1))
    assert len(left.name.encode()) <= 255 and left.name.endswith(".nii.gz")
    assert clean_stale_temporaries(tmp_path) == [left]


def test_plan_says_a_path_it_cannot_read(tmp_path, capsys) -> None:
    assert main(["plan", str(tmp_path / "missing")]) == 1
    assert "no such file or folder" in capsys.readouterr().err

