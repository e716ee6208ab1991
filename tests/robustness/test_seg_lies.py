"""DICOM SEGs that lie or disagree with the open series (issue 43), made from dcmqi's liver SEG of the real
3-slice GE series: a frame count the file does not hold is refused; a SEG drawn on another series of the
same scan is placed by patient coordinates and said; overlapping segments (made with highdicom, the
oracle) reach ``edit --labels`` with their note instead of "no operations given"."""

from __future__ import annotations

import json
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest
from pydicom.sr.codedict import codes

from medseg.cli import main
from medseg.errors import GeometryError
from medseg.io import load
from medseg.io.dicom_seg_read import read_dicom_seg


@pytest.fixture(scope="module")
def liver_seg(ct_dir: Path) -> Path:
    return ct_dir / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm"


@pytest.fixture(scope="module")
def image(three_slices: Path):
    return load(three_slices)


@pytest.mark.parametrize("frames", [300, 1])
def test_a_seg_whose_frame_count_the_file_does_not_hold_is_refused(liver_seg, image, tmp_path, frames) -> None:
    dataset = pydicom.dcmread(liver_seg)
    assert int(dataset.NumberOfFrames) == 3
    dataset.NumberOfFrames = frames
    dataset.save_as(tmp_path / "seg.dcm")
    with pytest.raises(GeometryError, match=f"declares {frames} frames but describes 3") as caught:
        read_dicom_seg(tmp_path / "seg.dcm", image)
    assert "seg.dcm" in str(caught.value)


def test_a_seg_whose_pixel_data_is_cut_is_refused(liver_seg, image, tmp_path) -> None:
    dataset = pydicom.dcmread(liver_seg)
    dataset.PixelData = dataset.PixelData[: len(dataset.PixelData) // 2]
    dataset.save_as(tmp_path / "seg.dcm")
    with pytest.raises(GeometryError, match="its pixel data holds .* bytes; its 3 frames of 512 x 512 need"):
        read_dicom_seg(tmp_path / "seg.dcm", image)


def test_a_seg_drawn_on_another_series_is_measured_with_a_note(liver_seg, image, three_slices, tmp_path,
                                                               capsys) -> None:
    clean = read_dicom_seg(liver_seg, image)
    dataset = pydicom.dcmread(liver_seg)
    dataset.ReferencedSeriesSequence[0].SeriesInstanceUID = "1.2.826.0.1.3680043.10.543.1"
    dataset.save_as(tmp_path / "seg.dcm")
    other = read_dicom_seg(tmp_path / "seg.dcm", image)
    np.testing.assert_array_equal(other.label_map.array, clean.label_map.array)  # same frame of reference
    assert any("drawn on another series (1.2.826.0.1.3680043.10.543.1)" in n for n in other.notes)
    assert not any("another series" in n for n in clean.notes)
    assert main(["stats", str(tmp_path / "seg.dcm"), "--image", str(three_slices), "--json"]) == 0
    assert any("another series" in n for n in json.loads(capsys.readouterr().out)["notes"])


def test_an_overlapping_seg_given_to_edit_is_written_with_its_note(image, three_slices, tmp_path, capsys) -> None:
    sources = [pydicom.dcmread(p) for p in sorted(three_slices.iterdir())]
    for source in sources:
        source.SpecificCharacterSet = "ISO_IR 100"  # the GE files leave it empty, which highdicom refuses
    body = image.array > -300
    centre = np.zeros_like(body)
    centre[:, 200:320, 200:320] = True  # inside the body: every voxel of it overlaps
    algorithm = hd.AlgorithmIdentificationSequence("test", codes.DCM.ArtificialIntelligence, "1")
    descriptions = [hd.seg.SegmentDescription(n, name, codes.SCT.Tissue, codes.SCT.Tissue,
                                              hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC, algorithm)
                    for n, name in ((1, "body"), (2, "centre"))]
    order = np.argsort([float(s.ImagePositionPatient[2]) for s in sources])
    masks = np.stack([body, centre], axis=-1)[np.argsort(order)]  # in the sources' order
    seg = hd.seg.Segmentation(sources, masks.astype(np.uint8), hd.seg.SegmentationTypeValues.BINARY, descriptions,
                              pydicom.uid.generate_uid(), 1, pydicom.uid.generate_uid(), 1, "test", "test", "1", "1")
    seg.save_as(tmp_path / "overlap.dcm")
    out = tmp_path / "labels.nii.gz"
    assert main(["edit", str(three_slices), "--labels", str(tmp_path / "overlap.dcm"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    overlap = int(np.count_nonzero(body & centre))
    assert f"overlapping segments (one label per voxel: the later segment kept): body/centre {overlap} voxels" in err
    assert out.is_file()
    assert main(["edit", str(three_slices), "-o", str(tmp_path / "nothing.nii.gz")]) == 1
    assert "no operations given and no --labels to write" in capsys.readouterr().err
