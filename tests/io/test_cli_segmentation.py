"""medseg segment -o .dcm|.nii.gz, medseg stats, medseg mesh — through the real entry point."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import highdicom as hd
import numpy as np
import pytest

from medseg.cli import main


def test_bad_output_fails_before_the_model_runs(ct_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    import medseg.model.package as package

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not be loaded for an output that cannot be written")

    monkeypatch.setattr(package, "load_package", no_model)  # what opens every medseg package, the starter too
    image = str(ct_dir / "dcmqi_ct3slice_masks" / "image")
    assert main(["segment", image, "-o", str(tmp_path / "missing" / "seg.dcm")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["segment", image, "-o", str(tmp_path / "seg.png")]) == 1
    assert "cannot save a segmentation in this format" in capsys.readouterr().err
    nrrd = str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    assert main(["segment", nrrd, "-o", str(tmp_path / "seg.dcm")]) == 1
    assert "must reference the DICOM series" in capsys.readouterr().err


def test_segment_writes_a_dicom_seg_of_the_model_output(ct_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "starter.dcm"
    assert main(["segment", str(ct_dir / "dcmqi_ct3slice_masks" / "image"), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])  # the event stream's last line
    assert report["event"] == "done"
    seg = hd.seg.segread(str(out))
    descriptions = [seg.get_segment_description(n) for n in seg.get_segment_numbers()]
    assert {d.algorithm_type.value for d in descriptions} == {"AUTOMATIC"}
    assert {d.algorithm_identification[0].AlgorithmName for d in descriptions} == {report["model"]}
    assert {d.segment_label for d in descriptions} <= {"body", "lungs", "bones"}
    assert seg.ReferencedSeriesSequence[0].SeriesInstanceUID == \
        "1.2.392.200103.20080913.113635.1.2009.6.22.21.43.10.23430.1"


def test_stats_and_mesh_of_the_dcmqi_seg(ct_dir: Path, tmp_path: Path, capsys) -> None:
    folder = ct_dir / "dcmqi_ct3slice_masks"
    seg, image = str(folder / "masks" / "liver_SEG.dcm"), str(folder / "image")
    assert main(["stats", seg, "--image", image, "--json", "--csv", str(tmp_path / "s.csv")]) == 0
    (liver,) = json.loads(capsys.readouterr().out)["labels"]
    assert liver["name"] == "Liver" and liver["voxels"] == 107_098
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert rows[0]["name"] == "Liver" and int(rows[0]["voxels"]) == 107_098
    assert main(["mesh", seg, "--image", image, "-o", str(tmp_path / "meshes"), "--format", "obj"]) == 0
    assert [p.name for p in (tmp_path / "meshes").iterdir()] == ["1_Liver.obj"]
    capsys.readouterr()
    assert main(["stats", str(tmp_path / "nothing.nii.gz"), "--image", image]) == 1
    assert "no such file" in capsys.readouterr().err
