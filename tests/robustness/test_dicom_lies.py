"""DICOM series with a lying or careless header (issue 43), made here from the real 3-slice GE series: a
value that would change a number is refused (the file named) or stated, in load, ``info`` and ``convert``
alike; files of another size, study or modality inside a series are said; text from a file reaches the
terminal escaped. Oracle: pydicom's own reading of the clean file."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pydicom
import pytest
from probes import run_medseg

from medseg.cli import main
from medseg.errors import DicomError, GeometryError
from medseg.io import load, scan


def _series(source: Path, target: Path, change=None, only: int | None = None) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for index, path in enumerate(sorted(source.iterdir())):
        dataset = pydicom.dcmread(path)
        if change is not None and (only is None or index == only):
            change(dataset)
        dataset.save_as(target / path.name)
    return target


def _raw_value(path: Path, keyword: str, text: bytes) -> None:
    """Write ``text`` as the value of ``keyword`` in an implicit-VR file (pydicom refuses to make a DS of 'abc')."""
    tag = pydicom.datadict.tag_for_keyword(keyword)
    data = bytearray(path.read_bytes())
    at = data.find(struct.pack("<HH", tag >> 16, tag & 0xFFFF), 300)
    length = struct.unpack("<I", data[at + 4:at + 8])[0]
    value = text + (b" " if len(text) % 2 else b"")
    data[at:at + 8 + length] = data[at:at + 4] + struct.pack("<I", len(value)) + value
    path.write_bytes(bytes(data))


def _hu(path: Path) -> np.ndarray:
    """The oracle: pydicom's Hounsfield units of a clean file."""
    dataset = pydicom.dcmread(path)
    return dataset.pixel_array * float(dataset.RescaleSlope) + float(dataset.RescaleIntercept)


@pytest.mark.parametrize("keyword, text", [("RescaleIntercept", b"abc"), ("RescaleIntercept", b"nan"),
                                           ("RescaleSlope", b"0"), ("RescaleSlope", b"NaN"), ("RescaleSlope", b"1e30")])
def test_a_rescale_that_is_not_a_plausible_number_leaves_its_file_out_and_says_so(three_slices, tmp_path, keyword,
                                                                                 text, capsys) -> None:
    folder = _series(three_slices, tmp_path / "series")
    bad = sorted(folder.iterdir())[1]
    _raw_value(bad, keyword, text)
    volume = load(folder)
    skipped = [f for f in volume.meta.findings if f.kind == "non_image_skipped"]
    assert len(skipped) == 1 and bad.name in skipped[0].message
    assert keyword.replace("Rescale", "Rescale ") in skipped[0].message  # "its Rescale Slope is ..."
    kept = [Path(ref) for ref in volume.meta.source_files]
    assert bad.name not in {p.name for p in kept} and volume.shape_zyx[0] == 2
    for z, path in enumerate(kept):  # the two files kept are in HU as pydicom reads them
        np.testing.assert_array_equal(volume.array[z], _hu(path))
    assert main(["info", str(folder), "--json"]) == 0  # info names the file it left out, also with --json
    err = capsys.readouterr().err
    assert f"skipped {bad}" in err and keyword.replace("Rescale", "Rescale ") in err
    for path in sorted(folder.iterdir()):
        _raw_value(path, keyword, text)
    with pytest.raises(DicomError, match="no loadable CT volume") as caught:
        load(folder)
    assert bad.name in str(caught.value)


def test_an_absent_rescale_in_a_ct_is_stated(three_slices, tmp_path) -> None:
    def drop(dataset) -> None:
        del dataset.RescaleIntercept
        del dataset.RescaleSlope
    folder = _series(three_slices, tmp_path / "series", drop)
    volume = load(folder)
    finding = next(f for f in volume.meta.findings if f.kind == "no_rescale")
    assert "3 of the 3 CT images carry no Rescale Slope/Intercept" in finding.message
    clean = np.stack([pydicom.dcmread(p).pixel_array for p in sorted(folder.iterdir())])
    np.testing.assert_array_equal(np.sort(volume.array.ravel()), np.sort(clean.ravel()))  # stored values, unscaled


@pytest.mark.parametrize("length", [0x7FFFFFF0, 0])
def test_a_pixel_data_length_the_file_cannot_hold_is_refused_by_the_scan(three_slices, tmp_path, length, capsys) -> None:
    folder = _series(three_slices, tmp_path / "series")
    bad = sorted(folder.iterdir())[0]
    data = bytearray(bad.read_bytes())
    at = data.rfind(b"\xe0\x7f\x10\x00")
    data[at + 4:at + 8] = struct.pack("<I", length)
    bad.write_bytes(bytes(data))
    result = scan(folder)
    reasons = {Path(s.path).name: s.reason for s in result.skipped}
    assert bad.name in reasons and "Pixel Data" in reasons[bad.name]
    assert main(["info", str(folder)]) == 0
    assert bad.name in capsys.readouterr().out  # named, not silently left out


def test_a_slice_cut_in_half_is_named_by_info(three_slices, tmp_path, capsys) -> None:
    folder = _series(three_slices, tmp_path / "series")
    cut = sorted(folder.iterdir())[1]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    assert main(["info", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"{cut}: its Pixel Data declares" in out and "cut short" in out


def test_a_transfer_syntax_that_says_deflated_but_is_not_is_refused(three_slices, tmp_path) -> None:
    from pydicom.filebase import DicomBytesIO
    from pydicom.filewriter import write_file_meta_info

    folder = _series(three_slices, tmp_path / "series")
    for path in folder.iterdir():
        data = path.read_bytes()
        end = 144 + struct.unpack("<I", data[140:144])[0]
        meta = pydicom.dcmread(path, stop_before_pixels=True).file_meta
        meta.TransferSyntaxUID = "1.2.840.10008.1.2.1.99"
        buffer = DicomBytesIO()
        buffer.is_little_endian, buffer.is_implicit_VR = True, False
        write_file_meta_info(buffer, meta, enforce_standard=True)
        path.write_bytes(data[:128] + b"DICM" + buffer.getvalue() + data[end:])
    with pytest.raises(DicomError, match="says Deflated but the data after its file meta does not inflate"):
        load(folder)


def _three_ct_slices_plus(folder: Path, extra_name: str, change) -> Path:
    """The 3-slice series and one more file made from its middle slice by ``change``."""
    middle = pydicom.dcmread(sorted(folder.iterdir())[1])
    change(middle)
    middle.SOPInstanceUID = pydicom.uid.generate_uid()
    middle.save_as(folder / extra_name)
    return folder / extra_name


def test_a_slice_of_another_size_in_a_series_is_named(three_slices, tmp_path) -> None:
    folder = _series(three_slices, tmp_path / "series")
    middle = sorted(folder.iterdir())[1]
    dataset = pydicom.dcmread(middle)
    dataset.PixelData = np.ascontiguousarray(dataset.pixel_array[::2, ::2]).tobytes()
    dataset.Rows = dataset.Columns = 256
    dataset.PixelSpacing = [2 * float(v) for v in dataset.PixelSpacing]
    dataset.save_as(middle)
    volume = load(folder)
    split = next(f for f in volume.meta.findings if f.kind == "series_split")
    assert "1 image of another pixel spacing and of another size (256 x 256) (02.dcm)" in split.message
    assert middle.name == "02.dcm"


def test_an_mr_slice_in_a_ct_series_is_left_out_and_said(three_slices, tmp_path) -> None:
    folder = _series(three_slices, tmp_path / "series")
    extra = _three_ct_slices_plus(folder, "mr.dcm", lambda d: (setattr(d, "Modality", "MR"), setattr(
        d, "ImagePositionPatient", [float(v) for v in d.ImagePositionPatient[:2]] + [float(d.ImagePositionPatient[2]) + 1])))
    volume = load(folder)
    assert volume.meta.modality == "CT" and extra.name not in {Path(f).name for f in volume.meta.source_files}
    split = next(f for f in volume.meta.findings if f.kind == "series_split")
    assert "of another modality (MR)" in split.message and "mr.dcm" in split.message


def test_slices_of_another_study_forged_into_the_series_uid_are_left_out_and_said(three_slices, ct_dir, tmp_path) -> None:
    folder = _series(three_slices, tmp_path / "series")
    uid = pydicom.dcmread(sorted(folder.iterdir())[0]).SeriesInstanceUID
    head = sorted((ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing").iterdir())[:3]
    for path in head:
        forged = pydicom.dcmread(path)
        forged.SeriesInstanceUID = uid
        forged.save_as(folder / f"forged_{path.name}")
    volume = load(folder)
    assert len(volume.meta.source_files) == 3
    assert not any("forged" in f for f in volume.meta.source_files)
    split = next(f for f in volume.meta.findings if f.kind == "series_split")
    assert "3 images of another study" in split.message and "forged_01.dcm" in split.message


@pytest.mark.parametrize("photometric", ["PALETTE COLOR", "RGB"])
def test_a_colour_image_is_not_a_ct_volume(three_slices, tmp_path, photometric) -> None:
    folder = _series(three_slices, tmp_path / "series", lambda d: setattr(d, "PhotometricInterpretation", photometric))
    with pytest.raises(DicomError, match="no loadable CT volume.*secondary_capture"):
        load(folder)


def test_bits_stored_beyond_bits_allocated_is_refused(three_slices, tmp_path) -> None:
    folder = _series(three_slices, tmp_path / "series", lambda d: setattr(d, "BitsStored", 17))
    with pytest.raises(DicomError, match=r"Bits Stored \(17\) does not fit its Bits Allocated \(16\)"):
        load(folder)


@pytest.mark.parametrize("orientation, expected", [(None, "no_orientation"), ([0, 0, 0, 0, 0, 0], "refused"),
                                                   ([1, 0, 0, 1, 0, 0], "refused"), (["nan", 0, 0, 0, 1, 0], "refused")])
def test_image_orientation_missing_is_stated_and_unusable_is_refused(three_slices, tmp_path, orientation,
                                                                     expected) -> None:
    def change(dataset) -> None:
        if orientation is None:
            del dataset.ImageOrientationPatient
        else:
            dataset.ImageOrientationPatient = [str(v) for v in orientation]
    folder = _series(three_slices, tmp_path / "series", change)
    if expected == "refused":
        with pytest.raises(DicomError, match="Image Orientation \\(Patient\\)"):
            load(folder)
    else:
        volume = load(folder)
        assert expected in {f.kind for f in volume.meta.findings}
        np.testing.assert_array_equal(volume.direction, np.eye(3))


def test_terminal_escapes_in_a_series_description_are_printed_escaped(three_slices, tmp_path) -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07CT \u202egnp.exe"
    def describe(dataset) -> None:
        dataset.SpecificCharacterSet = "ISO_IR 192"  # UTF-8: the direction override survives the file
        dataset.SeriesDescription = hostile
    folder = _series(three_slices, tmp_path / "series", describe)
    run = run_medseg("info", folder)
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stdout and "\u202e" not in run.stdout and "\x07" not in run.stdout
    assert "\\x1b[2J\\x1b]0;owned\\x07CT \\u202egnp.exe" in run.stdout  # shown, as text
    listed = json.loads(run_medseg("info", folder, "--json").stdout)  # JSON carries it intact, escaped by JSON
    assert listed[0]["series_description"] == hostile


def test_a_fifo_and_a_huge_sparse_file_in_a_series_folder_neither_hang_nor_stop_the_scan(three_slices, tmp_path) -> None:
    folder = _series(three_slices, tmp_path / "series")
    os.mkfifo(folder / "pipe.dcm")
    with open(folder / "huge.dcm", "wb") as handle:  # a DICOM preamble, then 16 GiB of nothing
        handle.write(b"\x00" * 128 + b"DICM")
        handle.truncate(16 << 30)
    run = run_medseg("info", folder, timeout=120)  # a hang fails here (TimeoutExpired), as it did before
    assert run.returncode == 0, run.stderr
    assert "pipe.dcm: not a regular file (a FIFO (named pipe)): not read" in run.stdout
    assert "huge.dcm: not a readable DICOM header" in run.stdout
    converted = run_medseg("convert", "--quiet", folder, tmp_path / "out.nii.gz", timeout=120)
    assert converted.returncode == 0 and "pipe.dcm" in converted.stderr and "huge.dcm" in converted.stderr


def test_a_fifo_given_as_the_file_is_refused_not_waited_on(tmp_path) -> None:
    os.mkfifo(tmp_path / "pipe.nii.gz")
    run = run_medseg("convert", tmp_path / "pipe.nii.gz", tmp_path / "out.nii.gz", timeout=60)
    assert run.returncode == 1 and "not a regular file (a FIFO)" in run.stderr, run.stderr
    os.mkfifo(tmp_path / "pipe.dcm")
    run = run_medseg("info", tmp_path / "pipe.dcm", timeout=60)
    assert run.returncode == 1 and "pipe.dcm: not a regular file" in run.stderr, run.stderr


def test_a_pixel_spacing_of_zero_is_refused_in_the_gui_path_too(three_slices, tmp_path) -> None:
    """load_series (the window's loader) applies the rule load applies."""
    from medseg.io.dicom_load import load_series

    folder = _series(three_slices, tmp_path / "series", lambda d: setattr(d, "PixelSpacing", [0, 0]))
    series = scan(folder).series[0]
    assert "unusable_spacing" in {f.kind for f in series.findings}  # info shows it
    with pytest.raises(GeometryError, match="Pixel Spacing in the header is"):
        load_series(series)
    assert load_series(series, spacing_mm=(0.7, 0.7, 2.5)).spacing_mm == (0.7, 0.7, 2.5)
