"""Saving and reopening segmentations on every real series: DICOM SEG, NIfTI/NRRD/MHA + sidecar.

The oracle for placement is patient space: every SEG frame's own Image Position /
Orientation and pixel spacing (read with pydicom, pixels unpacked by pydicom) is mapped
into the image, and each set pixel must land on a voxel of the label it was saved from.
highdicom's own reader must accept every SEG medseg writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pydicom
import pytest
import SimpleITK as sitk

from medseg.core.labels import TISSUE, Code, Label, Provenance
from medseg.io import load
from medseg.io.dicom_seg_read import read_dicom_seg
from medseg.io.dicom_seg_write import write_dicom_seg
from medseg.io.label_files import read_label_map, sidecar_path, write_label_map
from medseg.io.segmentations import open_segmentation, save_segmentation

BONE = Code("3138006", "SCT", "Bone")  # DCMR CID 7166, as pydicom's codes.SCT.BoneTissue

# (id, path under ct/, regularize): every loadable real series, the irregular ones both ways.
SERIES = [
    ("dcmqi_3slice", "dcmqi_ct3slice_masks/image", True),
    ("totalseg_blank_uids", "totalsegmentator/example_ct_dicom", True),
    ("ge_tilt_varspacing_regular", "dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing", True),
    ("ge_tilt_varspacing_raw", "dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing", False),
    ("siemens_tilt_iop_only_regular", "dicom2nifti_testdata/gantry_tilt_siemens_iop_only", True),
    ("missing_slice_tilted_regular", "dicom2nifti_testdata/missing_slice_tilted_siemens", True),
    ("missing_slice_tilted_raw", "dicom2nifti_testdata/missing_slice_tilted_siemens", False),
    ("missing_slice_ge_regular", "dicom2nifti_testdata/missing_slice_ge_lightspeed16", True),
    ("philips_5mm", "dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series", True),
    ("enhanced_ct_multiframe", "pydicom_data/eCT_Supplemental.dcm", True),
    ("hitachi_tilted_single_slice", "pydicom_wheel_testfiles/J2K_pixelrep_mismatch.dcm", True),
    ("rows_flipped_single_slice", "pydicom_data/explicit_VR-UN.dcm", True),
]
NAMES = {3: "bones", 7: "liver"}


def edited_label_map(image):
    """What a clinician might have drawn: bone by threshold (and a corner of it by hand, so that every series
    has some), and a block painted by hand."""
    labels = np.zeros(image.shape_zyx, dtype=np.uint8)
    labels[image.array > 300] = 3
    nz, ny, nx = image.shape_zyx
    labels[-1, : ny // 8, : nx // 8] = 3
    labels[: max(1, nz - 1), ny // 3: ny // 2, nx // 4: nx // 2] = 7
    return image.with_array(labels, modality="SEG", labels=dict(NAMES))


@pytest.fixture(scope="module", params=SERIES, ids=[s[0] for s in SERIES])
def case(request, ct_dir: Path, tmp_path_factory):
    _, relative, regularize = request.param
    image = load(ct_dir / relative, regularize=regularize)
    label_map = edited_label_map(image)
    out = tmp_path_factory.mktemp(request.param[0])
    segments = [Label(3, "bones", category=TISSUE, type=BONE,
                      provenance=Provenance("SEMIAUTOMATIC", "medseg-starter", "1")), Label(7, "liver")]
    result = write_dicom_seg(label_map, image, out / "seg.dcm", segments)
    return image, label_map, result, out


def _frames_in_patient_space(path: Path):
    """(segment number, frame pixels, position, row dir, col dir, (row, col) spacing) per frame, by pydicom."""
    ds = pydicom.dcmread(str(path))
    pixels = ds.pixel_array.reshape(int(ds.NumberOfFrames), ds.Rows, ds.Columns)
    shared = ds.SharedFunctionalGroupsSequence[0]
    for index, groups in enumerate(ds.PerFrameFunctionalGroupsSequence):
        def pick(keyword):
            return (groups.get(keyword) or shared.get(keyword))[0]
        iop = np.array(pick("PlaneOrientationSequence").ImageOrientationPatient, dtype=float)
        spacing = [float(v) for v in pick("PixelMeasuresSequence").PixelSpacing]
        yield (int(pick("SegmentIdentificationSequence").ReferencedSegmentNumber), pixels[index],
               np.array(pick("PlanePositionSequence").ImagePositionPatient, dtype=float), iop[:3], iop[3:],
               spacing, groups)


def test_highdicom_reads_every_seg_medseg_writes(case) -> None:
    import highdicom as hd

    image, label_map, result, _ = case
    seg = hd.seg.segread(str(result.path))
    assert seg.SegmentationType == "BINARY"
    labels = {int(d.SegmentNumber): str(d.SegmentLabel) for d in seg.SegmentSequence}
    assert sorted(int(v) for v in np.unique(label_map.array) if v) == [3, 7]
    assert list(labels.values()) == ["bones", "liver"]
    first = seg.get_segment_description(1)  # bones: coded as given, with its provenance
    assert first.algorithm_type.value == "SEMIAUTOMATIC"
    assert (first.segmented_property_category.value, first.segmented_property_type.value) == ("85756007", "3138006")
    # the label nobody coded is stated as DICOM's "Unspecified", not guessed from its name ("liver")
    last = seg.get_segment_description(len(labels))
    assert last.segment_label == "liver"
    for concept in (last.segmented_property_category, last.segmented_property_type):
        assert (concept.value, concept.scheme_designator, concept.meaning) == ("111176", "DCM", "Unspecified")
    assert seg.FrameOfReferenceUID
    # The step the SEG states is the one its frames have (sources may carry a stale Spacing Between Slices).
    measures = seg.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
    if image.meta.extra.get("slice_positions_mm") is not None:
        assert "SpacingBetweenSlices" not in measures  # acquired steps vary: no single step is true
    elif "SpacingBetweenSlices" in measures and image.shape_zyx[0] > 1:
        assert float(measures.SpacingBetweenSlices) == pytest.approx(image.spacing_mm[2], abs=1e-3)
    series_refs = [item.SeriesInstanceUID for item in seg.ReferencedSeriesSequence]
    assert len(series_refs) == 1 and series_refs[0]


def test_every_seg_frame_lies_on_its_label_in_patient_space(case) -> None:
    image, label_map, result, _ = case
    present = sorted(int(v) for v in np.unique(label_map.array) if v)
    value_of_segment = {n: v for n, v in enumerate(present, start=1)}
    positions = image.meta.extra.get("slice_positions_mm")
    counted = 0
    for segment, pixels, position, row_dir, col_dir, spacing, groups in _frames_in_patient_space(result.path):
        rows, cols = np.nonzero(pixels)
        points = position + np.outer(cols * spacing[1], row_dir) + np.outer(rows * spacing[0], col_dir)
        if positions is not None:
            # Raw stack: the Volume's even z step is a stand-in; slice k truly sits at the acquired position.
            along = np.asarray(positions) @ image.direction[:, 2]
            k = int(np.argmin(np.abs(along - position @ image.direction[:, 2])))
            assert np.allclose(positions[k], position, atol=1e-3)
            in_plane = (points - positions[k]) @ image.direction[:, :2] / np.asarray(image.spacing_mm[:2])
            index = np.column_stack([in_plane, np.full(len(points), k)])
        else:
            index = image.physical_to_index(points)
        # DS strings keep ~16 significant digits of the cosines: 0.01 voxel over 500 pixels is that rounding.
        assert np.allclose(index, np.round(index), atol=1e-2), "frame pixels must sit on voxel centres"
        x, y, z = np.round(index).astype(int).T
        assert np.all(label_map.array[z, y, x] == value_of_segment[segment])
        counted += len(points)
        if result.mode == "acquired":
            reference = groups.DerivationImageSequence[0].SourceImageSequence[0].ReferencedSOPInstanceUID
            assert reference  # each frame names its own source image
    assert counted == int(np.count_nonzero(label_map.array))


def test_dicom_seg_reopens_identically(case) -> None:
    """Voxel for voxel, with the label values it was saved with (bones 3, liver 7), not the segment numbers."""
    import highdicom as hd

    image, label_map, result, _ = case
    present = sorted(int(v) for v in np.unique(label_map.array) if v)
    # highdicom, independently: segment n is the n-th label and its description records the label value
    seg = hd.seg.segread(str(result.path))
    assert [str(seg.get_segment_description(n).SegmentDescription) for n in seg.get_segment_numbers()] == [
        f"medseg label value {v}" for v in present]
    opened = read_dicom_seg(result.path, image)
    assert opened.placement == "exact" and opened.values_restored
    assert {s.value: s.name for s in opened.segments} == {v: NAMES[v] for v in present}
    np.testing.assert_array_equal(opened.label_map.array, label_map.array)
    regular = any(f.kind == "regularized" for f in image.meta.findings)
    assert result.mode == ("regular_grid" if regular else "acquired")
    if regular:
        comments = pydicom.dcmread(str(result.path), stop_before_pixels=True).ImageComments
        finding = next(f for f in image.meta.findings if f.kind == "regularized")
        assert "regularised" in comments and finding.message in comments  # what was done, in the image's own words


@pytest.mark.parametrize("suffix", [".nii.gz", ".nrrd", ".mha"])
def test_label_map_files_round_trip_with_names(case, suffix: str) -> None:
    image, label_map, _, out = case
    path = out / f"labels{suffix}"
    notes = save_segmentation(label_map, image, path, [Label(7, "liver", color=(10, 200, 30))])
    assert sidecar_path(path).is_file() and notes
    # SimpleITK, independently: same voxels at the same patient coordinates.
    written = sitk.ReadImage(str(path))
    assert np.allclose(written.GetOrigin(), image.origin_mm, atol=1e-4)
    assert np.allclose(np.reshape(written.GetDirection(), (3, 3)), image.direction, atol=1e-6)
    np.testing.assert_array_equal(sitk.GetArrayFromImage(written), label_map.array)
    opened = read_label_map(path, image)
    np.testing.assert_array_equal(opened.label_map.array, label_map.array)
    names = {s.value: s.name for s in opened.segments}
    present = {int(v) for v in np.unique(label_map.array) if v}
    assert {v: names[v] for v in present} == {v: NAMES[v] for v in present}
    colors = {s.value: s.color for s in opened.segments}
    if 7 in present:
        assert colors[7] == (10, 200, 30)
    sidecar = json.loads(sidecar_path(path).read_text())
    regular = any(f.kind == "regularized" for f in image.meta.findings)
    assert (sidecar["regularized"] is not None) == regular
    if regular:
        assert sidecar["regularized"]["reasons"] and sidecar["regularized"]["method"]
    assert "patient_name" not in json.dumps(sidecar).lower()


def test_dcmqi_seg_opens_onto_its_ct_where_the_nrrd_says(ct_dir: Path) -> None:
    folder = ct_dir / "dcmqi_ct3slice_masks"
    image = load(folder / "image")
    opened = open_segmentation(folder / "masks" / "liver_SEG.dcm", image)
    reference = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / "masks" / "liver_seg.nrrd")))
    assert int(np.count_nonzero(opened.label_map.array)) == 107_098
    np.testing.assert_array_equal(opened.label_map.array > 0, reference > 0)
    assert opened.segments[0].name == "Liver" and opened.segments[0].provenance.algorithm_type == "SEMIAUTOMATIC"
    # dcmqi records no medseg label values: its segment numbers become the values, and the user is told
    assert opened.segments[0].value == 1 and "segment numbers" in " ".join(opened.naming)


def test_raw_stack_seg_opens_onto_the_regularised_image_by_plane(ct_dir: Path, tmp_path: Path) -> None:
    """A SEG on the acquired tilted slices lands on the regular grid where those slices are in the patient."""
    folder = ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing"
    raw = load(folder, regularize=False)
    regular = load(folder, regularize=True)
    labels = np.zeros(raw.shape_zyx, dtype=np.uint8)
    labels[3:25, 200:320, 180:330] = 1
    write_dicom_seg(raw.with_array(labels, labels={1: "block"}), raw, tmp_path / "raw.dcm")
    opened = read_dicom_seg(tmp_path / "raw.dcm", regular)
    assert opened.placement == "nearest_plane"
    # Every labelled voxel of the regular grid lies within half a pixel (in plane) of the block drawn on the
    # acquired slices, and within the acquired planes' extent along the normal.
    positions = np.asarray(raw.meta.extra["slice_positions_mm"])
    z, y, x = np.nonzero(opened.label_map.array)
    points = regular.index_to_physical(np.column_stack([x, y, z]).astype(float))
    normal, row, col = regular.direction[:, 2], regular.direction[:, 0], regular.direction[:, 1]
    along = positions @ normal
    k = np.abs(along[None, :] - (points @ normal)[:, None]).argmin(axis=1)
    u = np.einsum("ij,j->i", points - positions[k], row) / raw.spacing_mm[0]
    v = np.einsum("ij,j->i", points - positions[k], col) / raw.spacing_mm[1]
    assert np.all((u > 180 - 0.5 - 1e-3) & (u < 329 + 0.5 + 1e-3))
    assert np.all((v > 200 - 0.5 - 1e-3) & (v < 319 + 0.5 + 1e-3))
    assert k.min() >= 3 and k.max() <= 24
    # The block's volume survives the change of grid within a slice's worth.
    block_ml = labels.sum() * raw.spacing_mm[0] * raw.spacing_mm[1] * float(np.mean(np.diff(along[3:26])))
    assert abs(opened.label_map.array.sum() * regular.voxel_volume_ml * 1000 - block_ml) < 0.1 * block_ml


def test_a_seg_for_another_scan_is_refused(ct_dir: Path) -> None:
    from medseg.errors import GeometryError

    image = load(ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series")
    with pytest.raises(GeometryError, match="frame of reference"):
        read_dicom_seg(ct_dir / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm", image)


def test_a_label_map_elsewhere_in_space_is_refused(ct_dir: Path, tmp_path: Path) -> None:
    from medseg.errors import GeometryError

    image = load(ct_dir / "dcmqi_ct3slice_masks" / "image")
    far = image.with_array(np.ones(image.shape_zyx, dtype=np.uint8))
    far.origin_mm = (5000.0, 5000.0, 5000.0)
    write_label_map(far, tmp_path / "far.nii.gz")
    with pytest.raises(GeometryError, match="outside the open image"):
        read_label_map(tmp_path / "far.nii.gz", image)


def test_a_stale_spacing_between_slices_is_not_copied_into_the_seg(ct_dir: Path, tmp_path: Path) -> None:
    """Copied headers often keep another series' Spacing Between Slices (the GE chest slice in
    shared/data says 6.5 mm); readers such as dcmqi trust it, so the SEG must state the frames' own step."""
    series = tmp_path / "series"
    series.mkdir()
    for source in sorted((ct_dir / "dcmqi_ct3slice_masks" / "image").iterdir()):
        ds = pydicom.dcmread(source)
        ds.SpacingBetweenSlices = 6.5
        ds.save_as(series / source.name)
    image = load(series)
    write_dicom_seg(edited_label_map(image), image, tmp_path / "seg.dcm")
    measures = pydicom.dcmread(str(tmp_path / "seg.dcm"), stop_before_pixels=True) \
        .SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
    positions = [float(pydicom.dcmread(p, stop_before_pixels=True).ImagePositionPatient[2]) for p in series.iterdir()]
    assert float(measures.SpacingBetweenSlices) == pytest.approx(np.median(np.diff(sorted(positions))), abs=1e-3)
