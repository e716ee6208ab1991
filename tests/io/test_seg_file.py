"""medseg.io.seg_file writes exactly the bytes pydicom writes (it only encodes each shared per-frame item once).

Oracle: pydicom's own ``save_as`` of the same dataset, compared byte for byte, for a SEG highdicom
builds on a real series (frames on the same slice share their position and source items).
"""

from __future__ import annotations

import io
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest

from medseg.io.seg_file import save_multiframe


def _seg(ct_dir: Path) -> pydicom.Dataset:
    """A BINARY SEG of three segments over six slices of TotalSegmentator's example series (UIDs filled in)."""
    sources = []
    for index, path in enumerate(sorted((ct_dir / "totalsegmentator" / "example_ct_dicom").iterdir())[:6]):
        dataset = pydicom.dcmread(path)
        dataset.StudyInstanceUID = dataset.StudyInstanceUID or "1.2.3.4"
        dataset.SeriesInstanceUID = dataset.SeriesInstanceUID or "1.2.3.4.5"
        dataset.FrameOfReferenceUID = dataset.FrameOfReferenceUID or "1.2.3.4.6"
        dataset.SOPInstanceUID = dataset.SOPInstanceUID or f"1.2.3.4.7.{index}"
        dataset.SOPClassUID = dataset.file_meta.MediaStorageSOPClassUID
        sources.append(dataset)
    sources.sort(key=lambda d: float(d.ImagePositionPatient[2]))
    labels = np.zeros((len(sources), int(sources[0].Rows), int(sources[0].Columns)), np.uint8)
    labels[:, 100:200, 100:220] = 1
    labels[2:5, 250:300, 200:260] = 2
    labels[1:3, 300:340, 300:380] = 3
    descriptions = [hd.seg.SegmentDescription(
        n, f"structure {n}", pydicom.sr.codedict.codes.SCT.Organ, pydicom.sr.codedict.codes.SCT.Organ,
        "MANUAL", display_color=hd.color.CIELabColor.from_rgb(10 * n, 100, 200)) for n in (1, 2, 3)]
    return hd.seg.Segmentation(sources, labels, hd.seg.SegmentationTypeValues.BINARY, descriptions, hd.UID(), 7,
                               hd.UID(), 1, "medseg", "medseg", "0", "1", content_label="SEG")


@pytest.mark.parametrize("pixel_vr", ["as built", "OB or OW"])
def test_the_file_is_pydicoms_byte_for_byte(ct_dir: Path, tmp_path: Path, pixel_vr: str) -> None:
    seg = _seg(ct_dir)
    assert len(seg.PerFrameFunctionalGroupsSequence) == 6 + 3 + 2
    if pixel_vr != "as built":
        seg["PixelData"].VR = pixel_vr  # as highdicom leaves it for some arrays; pydicom resolves it on writing
    expected = io.BytesIO()
    seg.save_as(expected, enforce_file_format=True)
    save_multiframe(seg, tmp_path / "seg.dcm")
    assert (tmp_path / "seg.dcm").read_bytes() == expected.getvalue()
    read = hd.seg.segread(tmp_path / "seg.dcm")
    assert read.get_volume(combine_segments=True).array.max() == 3


def test_an_unexpected_transfer_syntax_is_left_to_pydicom(ct_dir: Path, tmp_path: Path) -> None:
    seg = _seg(ct_dir)
    seg.file_meta.TransferSyntaxUID = pydicom.uid.ImplicitVRLittleEndian
    expected = io.BytesIO()
    seg.save_as(expected, enforce_file_format=True, implicit_vr=True)
    save_multiframe(seg, tmp_path / "seg.dcm")
    assert (tmp_path / "seg.dcm").read_bytes() == expected.getvalue()
