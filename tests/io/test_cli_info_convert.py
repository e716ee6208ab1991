"""`medseg info` and `medseg convert` on real data, and their exit codes on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medseg.cli import main
from medseg.io import load, read_image


def test_info_json_lists_every_series_with_geometry(ct_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["info", str(ct_dir / "dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series"), "--json"]) == 0
    series = json.loads(capsys.readouterr().out)
    assert sorted(s["kind"] for s in series) == ["localizer", "secondary_capture", "secondary_capture",
                                                 "volume", "volume"]
    thick = next(s for s in series if s["series_description"] == "STD BRAIN 5MM")
    assert thick["n_files"] == 28 and thick["size_xyz"] == [512, 512, 28]
    assert thick["spacing_mm"] == pytest.approx([0.451172, 0.451172, 5.0], abs=1e-4)
    assert thick["direction"] == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    assert thick["transfer_syntaxes"] == ["1.2.840.10008.1.2.1"]
    assert len(thick["origin_mm"]) == 3 and thick["series_uid"]


def test_info_text_shows_findings(ct_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["info", str(ct_dir / "dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing")]) == 0
    out = capsys.readouterr().out
    assert "size [x, y, z]:    [512, 512, 28]" in out
    assert "finding [gantry_tilt]: The gantry was tilted 18.5° for this scan." in out
    assert "finding [variable_spacing]" in out
    assert "Explicit VR Little Endian" in out


def test_info_never_prints_patient_identity(ct_dir: Path, capsys: pytest.CaptureFixture) -> None:
    import pydicom

    path = ct_dir / "cornerstone_testimages/CTImage.dcm"
    name = str(pydicom.dcmread(path, stop_before_pixels=True).PatientName)
    assert name
    main(["info", str(path)])
    main(["info", str(path), "--json"])
    assert name not in capsys.readouterr().out


def test_info_on_an_image_file(ct_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["info", str(ct_dir / "pyradiomics_lung1/lung1_image.nrrd"), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["size_xyz"] == [512, 512, 48] and entry["kind"] == "image_file"


def test_convert_dicom_to_nifti_and_back(ct_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = ct_dir / "dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series"
    assert main(["info", str(folder), "--json"]) == 0
    thin_uid = next(s for s in json.loads(capsys.readouterr().out) if s["size_xyz"][2] == 16)["series_uid"]
    out = tmp_path / "thin.nii.gz"
    assert main(["convert", str(folder), str(out), "--series", thin_uid, "--quiet"]) == 0
    written = read_image(out)
    source = load(folder, series_uid=thin_uid)
    np.testing.assert_array_equal(written.array, source.array)
    np.testing.assert_allclose(written.origin_mm, source.origin_mm, atol=1e-4)
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["info", "/no/such/folder"], "no such file or folder"),
    (["convert", "/no/such/folder", "out.nii.gz"], "no such file or folder"),
    (["convert", "{ct}/pydicom_wheel_testfiles/CT_small.dcm", "{tmp}/out.png"], "unsupported output format"),
    (["convert", "{ct}/dicom2nifti_testdata/duplicate_positions_siemens", "{tmp}/o.nii.gz"], "no loadable CT volume"),
    (["info", "{ct}/pyradiomics_lung1/LICENSE_BSD-3-Clause.txt"], "no DICOM image series found"),
])
def test_bad_input_exits_non_zero_with_a_message(ct_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                 argv: list[str], message: str) -> None:
    argv = [a.format(ct=ct_dir, tmp=tmp_path) for a in argv]
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_console_script_exit_code(ct_dir: Path) -> None:
    completed = subprocess.run([sys.executable, "-m", "medseg", "info", "/no/such/folder"], capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 1
    assert "no such file or folder" in completed.stderr and "Traceback" not in completed.stderr
