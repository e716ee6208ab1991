"""Inputs (folder, file list, .zip, DICOMDIR), skipped files with reasons, progress,
cancellation, and progressive middle-first decoding."""

from __future__ import annotations

import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from pydicom.fileset import FileSet

from medseg.errors import Cancelled, DicomError
from medseg.io import load, load_series, middle_out, scan
from medseg.progress import CancelToken, Progress

PHILIPS = "dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series"


def thin_series_files(ct_dir: Path) -> list[Path]:
    return sorted((ct_dir / PHILIPS).glob("S2020_*"))


def test_list_of_files_and_zip_give_the_same_volume(ct_dir: Path, tmp_path: Path) -> None:
    files = thin_series_files(ct_dir)
    from_list = load(files)
    assert from_list.size_xyz == (512, 512, 16)
    archive = tmp_path / "study.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in files:
            zf.write(path, f"study/{path.name}")
        zf.writestr("study/readme.txt", "not dicom")
    result = scan(archive)
    assert [s.n_slices for s in result.series] == [16]
    assert [Path(k.path.split("::")[1]).name for k in result.skipped] == ["readme.txt"]
    from_zip = load(archive)
    np.testing.assert_array_equal(from_zip.array, from_list.array)
    assert from_zip.origin_mm == from_list.origin_mm
    assert all("::study/S2020_" in ref for ref in from_zip.meta.source_files)


def test_dicomdir_lists_only_its_files(ct_dir: Path, tmp_path: Path) -> None:
    fileset = FileSet()
    files = thin_series_files(ct_dir)  # as text: I10, I100, ..., I160, I20, ...: [1:8] = instances 10-16
    for path in files[1:7]:
        fileset.add(path)
    media = tmp_path / "media"
    fileset.write(media)
    stray = media / "stray.dcm"
    shutil.copy(files[7], stray)  # in the folder but not in the DICOMDIR
    volume = load(media / "DICOMDIR")
    assert volume.size_xyz == (512, 512, 6)
    assert str(stray) not in volume.meta.source_files
    assert load(media).size_xyz == (512, 512, 7)  # the folder scan finds the stray file too


def test_skipped_files_say_why(ct_dir: Path) -> None:
    result = scan(ct_dir / "dcmqi_ct3slice_masks")
    reasons = {Path(k.path).name: k.reason for k in result.skipped}
    assert "Segmentation" in reasons["liver_SEG.dcm"]
    assert "not a DICOM file" in reasons["liver_seg.nrrd"]
    assert [s.n_slices for s in result.series] == [3]


def test_bad_paths_raise_medseg_errors(tmp_path: Path) -> None:
    with pytest.raises(DicomError, match="no such file"):
        scan(tmp_path / "nothing-here")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DicomError, match="no loadable CT volume") as caught:
        load(tmp_path)
    assert "notes.txt" in str(caught.value)
    bad_zip = tmp_path / "bad.zip"
    bad_zip.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(DicomError):
        load(bad_zip)


def test_series_chosen_by_uid_or_key(ct_dir: Path) -> None:
    result = scan(ct_dir / PHILIPS)
    thin = next(s for s in result.series if s.n_slices == 16)
    assert load(ct_dir / PHILIPS, series_uid=thin.series_uid).size_xyz[2] == 16
    assert load(ct_dir / PHILIPS, series_uid=thin.key).size_xyz[2] == 16
    with pytest.raises(DicomError, match="no series"):
        load(ct_dir / PHILIPS, series_uid="1.2.3.4")


def test_middle_slice_is_delivered_first_and_every_slice_once(ct_dir: Path) -> None:
    assert middle_out(5) == [2, 1, 3, 0, 4]
    series = next(s for s in scan(ct_dir / PHILIPS).series if s.n_slices == 28)
    seen: list[int] = []
    lock = threading.Lock()

    def on_slice(z: int, image: np.ndarray) -> None:
        with lock:
            seen.append(z)
        assert image.shape == (512, 512) and image.dtype == np.int16

    events: list[Progress] = []
    volume = load_series(series, on_slice=on_slice, progress=events.append)
    assert seen[0] == 13  # (28 - 1) // 2: the middle slice comes first
    assert sorted(seen) == list(range(28))
    assert events[-1].fraction == 1.0
    assert all(b.fraction >= a.fraction for a, b in zip(events, events[1:]))
    assert volume.meta.window_center is not None and volume.meta.window_width > 0
    assert len(volume.meta.sop_instance_uids) == 28 and volume.meta.sop_instance_uids[13] == series.slices[13].sop_instance_uid


def test_cancel_stops_loading(ct_dir: Path) -> None:
    series = next(s for s in scan(ct_dir / PHILIPS).series if s.n_slices == 28)
    token = CancelToken()

    def cancel_after_first(z: int, image: np.ndarray) -> None:
        token.cancel()

    with pytest.raises(Cancelled):
        load_series(series, on_slice=cancel_after_first, cancel=token)
    token_scan = CancelToken()
    token_scan.cancel()
    with pytest.raises(Cancelled):
        scan(ct_dir / PHILIPS, cancel=token_scan)


def test_dataset_without_preamble_or_file_meta_is_read(ct_dir: Path, tmp_path: Path) -> None:
    import pydicom
    from pydicom.dataset import FileMetaDataset

    source = ct_dir / "dcmqi_ct3slice_masks/image"
    for path in sorted(source.iterdir()):
        ds = pydicom.dcmread(path)
        ds.file_meta = FileMetaDataset()
        ds.preamble = None
        ds.save_as(tmp_path / path.name, implicit_vr=True, little_endian=True, enforce_file_format=False)
    assert (tmp_path / "01.dcm").read_bytes()[128:132] != b"DICM"
    bare = load(tmp_path)
    np.testing.assert_array_equal(bare.array, load(source).array)
    assert bare.origin_mm == load(source).origin_mm
