"""`medseg edit` on real CT against SimpleITK, and bad operations refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from edit_cases import CARTILAGES, LIVER

from medseg.cli import main
from medseg.io import read_image


def test_keep_largest_grow_and_lock_match_simpleitk(abdomen_files, tmp_path: Path, capsys):
    image_path, labels_path = abdomen_files
    out = tmp_path / "cleaned.nii.gz"
    code = main(["edit", str(image_path), "--labels", str(labels_path), "-o", str(out), "--totalsegmentator-names",
                 "--keep-largest", "costal_cartilages", "--lock", "liver", "--grow", "spleen", "6", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert [o["operation"] for o in summary["operations"]] == [
        "--keep-largest costal_cartilages", "--lock liver", "--grow spleen 6"]
    original = sitk.ReadImage(str(labels_path))
    written = sitk.ReadImage(str(out))
    assert written.GetSize() == original.GetSize() and np.allclose(written.GetOrigin(), original.GetOrigin())
    before, after = sitk.GetArrayFromImage(original), sitk.GetArrayFromImage(written)

    largest = sitk.GetArrayFromImage(sitk.RelabelComponent(sitk.ConnectedComponent(original == CARTILAGES, True))) == 1
    assert np.array_equal(after == CARTILAGES, largest)
    spleen = sitk.Cast(original == 1, sitk.sitkUInt8)
    distance = sitk.GetArrayFromImage(sitk.SignedMaurerDistanceMap(spleen, insideIsPositive=False,
                                                                   squaredDistance=False, useImageSpacing=True))
    grown = (before == 1) | (distance <= 6 + 1e-4)
    assert np.array_equal(after == 1, grown & (before != LIVER))  # unlocked labels are overwritten, liver is not
    assert np.array_equal(after == LIVER, before == LIVER)  # locked: the grown spleen went around it
    assert np.count_nonzero(after == 1) > np.count_nonzero(before == 1)
    sidecar = json.loads((tmp_path / "cleaned.labels.json").read_text())  # the one sidecar format
    assert sidecar["format"] == "medseg-labels/1"
    liver = next(row for row in sidecar["labels"] if row["value"] == LIVER)
    assert liver["name"] == "liver" and liver["locked"] is True
    # --totalsegmentator-names gives each structure TotalSegmentator's published code (its mapping CSV, read
    # here with the csv module as the oracle), not one guessed from the name
    import csv

    mapping = Path(__file__).resolve().parents[2] / "resources" / "labels" / "totalsegmentator_snomed_mapping.csv"
    row = next(r for r in csv.DictReader(mapping.open()) if r["Structure"] == "liver")
    assert liver["category"] == {"value": row["SegmentedPropertyCategoryCodeSequence.CodeValue"], "scheme": "SCT",
                                 "meaning": row["SegmentedPropertyCategoryCodeSequence.CodeMeaning"]}
    assert liver["type"] == {"value": row["SegmentedPropertyTypeCodeSequence.CodeValue"], "scheme": "SCT",
                             "meaning": row["SegmentedPropertyTypeCodeSequence.CodeMeaning"]}


@pytest.mark.parametrize("operations, message", [
    (["--grow", "5", "-2"], "MM must be from 0 to 100 mm, got -2"),
    (["--keep-largest", "no_such_organ"], "no label named 'no_such_organ'"),
    (["--threshold", "200", "100", "3"], "range is empty"),
    (["--lock", "5", "--shrink", "5", "2"], "locked by an earlier --lock"),
    (["--union", "5", "5"], "the same label"),
    (["--keep-largest", "250"], "no label 250"),
])
def test_bad_operations_are_named_before_anything_runs(abdomen_files, tmp_path: Path, capsys, operations, message):
    image_path, labels_path = abdomen_files
    out = tmp_path / "out.nii.gz"
    code = main(["edit", str(image_path), "--labels", str(labels_path), "-o", str(out),
                 "--keep-largest", "117", *operations])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_threshold_then_islands_from_an_empty_map(abdomen_files, tmp_path: Path):
    image_path, _ = abdomen_files
    out = tmp_path / "bone.nrrd"
    assert main(["edit", str(image_path), "-o", str(out), "--threshold", "250", "3000", "9",
                 "--remove-smaller", "9", "1.0"]) == 0
    hu = sitk.ReadImage(str(image_path))
    mask = sitk.BinaryThreshold(hu, 250, 3000)
    kept = sitk.RelabelComponent(sitk.ConnectedComponent(mask, True), minimumObjectSize=int(np.ceil(1.0 / 0.027)))
    written = read_image(out)
    assert np.array_equal(written.array == 9, sitk.GetArrayFromImage(kept) > 0)


# --- issue #26: grow from seeds, the confidence-connected click and scissors in batch ---------------------------

def test_grow_from_seeds_in_batch_equals_the_tool(ct_dir, tmp_path: Path, capsys):
    """Seeds placed on lung1's nodule as a person would, written as a label image with a 'background' entry in
    its sidecar; `medseg edit --grow-from-seeds` writes exactly what the tool gives."""
    from seed_placement import dice, place_seeds

    from medseg.core.volume import Volume
    from medseg.edit.label_map import LabelMap
    from medseg.edit.tools.grow_seeds import BACKGROUND_SEED, GrowParameters, grow_from_seeds
    from medseg.io import write_image

    image_path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    image = read_image(image_path)
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd").array == 1
    seeds, _ = place_seeds(nodule, image.spacing_zyx, 1, 2)
    seeds_path = tmp_path / "seeds.nii.gz"
    write_image(Volume(seeds.astype(np.uint8), image.spacing_mm, image.origin_mm, image.direction), seeds_path)
    (tmp_path / "seeds.labels.json").write_text(json.dumps({"1": {"name": "nodule"}, "2": {"name": "Background"}}))
    out = tmp_path / "grown.nii.gz"
    assert main(["edit", str(image_path), "-o", str(out), "--grow-from-seeds", str(seeds_path), "--roi-margin", "20",
                 "--json"]) == 0
    written = read_image(out).array
    expected_seeds = np.where(seeds == 2, BACKGROUND_SEED, seeds).astype(np.uint16)
    delta = grow_from_seeds(LabelMap.empty_like(image), image, expected_seeds, GrowParameters(roi_margin_mm=20))
    expected = np.zeros(image.shape_zyx, dtype=np.uint8)
    delta.write(expected, delta.new)
    assert np.array_equal(written, expected)
    assert set(np.unique(written).tolist()) == {0, 1}  # background seeds paint nothing
    assert dice(written == 1, nodule) >= 0.70


def test_confidence_connected_and_scissors_in_batch(ct_dir, tmp_path: Path):
    """A click at the nodule's centre given in LPS mm, then scissors on the coronal view cutting its upper half."""
    from skimage.draw import polygon2mask

    image_path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    image = read_image(image_path)
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd").array == 1
    centre_zyx = np.rint(np.argwhere(nodule).mean(axis=0)).astype(int)
    lps = image.index_to_physical(centre_zyx[::-1])
    point = ",".join(f"{v:.2f}" for v in lps)
    assert point.startswith("-")  # a negative first coordinate must not read as an option
    outline = tmp_path / "cut.json"
    # a coronal rectangle (x from -30 to +30 voxels around the nodule, z above its centre), in LPS mm
    x0, x1 = centre_zyx[2] - 30.3, centre_zyx[2] + 30.3
    z0, z1 = centre_zyx[0] + 0.4, image.shape_zyx[0] - 0.6
    corners = [(x0, centre_zyx[1], z0), (x1, centre_zyx[1], z0), (x1, centre_zyx[1], z1), (x0, centre_zyx[1], z1)]
    outline.write_text(json.dumps({"view": "coronal", "operation": "erase-inside",
                                   "points_lps_mm": [list(image.index_to_physical(c)) for c in corners]}))
    out = tmp_path / "click.nii.gz"
    assert main(["edit", str(image_path), "-o", str(out), "--confidence-connected", point, "2.5", "7"]) == 0
    clicked = read_image(out).array == 7
    cut = tmp_path / "cut.nii.gz"
    assert main(["edit", str(image_path), "-o", str(cut), "--confidence-connected", point, "2.5", "7",
                 "--scissors", str(outline)]) == 0
    after = read_image(cut).array == 7
    # the prism, rasterised independently in the coronal (z, x) plane
    prism = polygon2mask((image.shape_zyx[0], image.shape_zyx[2]), np.array([(c[2], c[0]) for c in corners]))
    expected = clicked & ~prism[:, None, :]
    assert np.array_equal(after, expected) and clicked.sum() > after.sum() > 0


@pytest.mark.parametrize("operation, content, message", [
    (["--confidence-connected", "1,2", "2.5", "7"], None, "not a point"),
    (["--confidence-connected", "0,0,9999", "2.5", "7"], None, "outside the image"),
    (["--confidence-connected", "-146,-325,-700", "0", "7"], None, "K must be from 0.1 to 10, got 0"),
    (["--grow-from-seeds", "{missing}"], None, "does not exist"),
    (["--scissors", "{file}"], "not json", "not JSON"),
    (["--scissors", "{file}"], '{"view": "oblique", "points_lps_mm": []}', "axial, coronal or sagittal"),
    (["--scissors", "{file}"], '{"view": "axial", "points_lps_mm": [[0, 0, 0]]}', "three or more"),
    (["--scissors", "{file}"], '{"view": "axial", "points_lps_mm": [[0,0,0],[1,0,0],[0,1,0]], "operation": "fill-inside"}',
     "needs a \"label\""),
])
def test_bad_semi_automatic_operations_are_named_before_anything_runs(ct_dir, tmp_path: Path, capsys, operation,
                                                                      content, message):
    image_path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    polygon = tmp_path / "outline.json"
    if content is not None:
        polygon.write_text(content)
    operation = [o.format(file=polygon, missing=tmp_path / "no_seeds.nii.gz") for o in operation]
    out = tmp_path / "out.nii.gz"
    code = main(["edit", str(image_path), "-o", str(out), "--threshold", "-100", "100", "3", *operation])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_edit_reads_the_sidecar_the_app_and_segment_write(abdomen_files, tmp_path: Path, capsys):
    """A segmentation saved by File ▸ Save (and by `medseg segment -o`) goes through `save_segmentation` with the
    structured sidecar; `medseg edit --labels` takes it (it crashed: ValueError on the "format" key), keeps its
    names, colours, locks and provenance, and also takes the sidecar's own path."""
    from medseg.core.labels import Label, Provenance
    from medseg.io.segmentations import save_segmentation

    image_path, labels_path = abdomen_files
    image, labels = read_image(image_path), read_image(labels_path)
    saved = tmp_path / "saved.nii.gz"
    made_by = Provenance.model("TotalSegmentator", "2")
    save_segmentation(labels, image, saved, [
        Label(1, "spleen", (10, 20, 30), provenance=made_by), Label(LIVER, "liver", provenance=made_by, locked=True),
        Label(CARTILAGES, "costal cartilages", provenance=made_by)])
    out = tmp_path / "out.nii.gz"
    for given in (saved, tmp_path / "saved.labels.json"):
        assert main(["edit", str(image_path), "--labels", str(given), "-o", str(out),
                     "--keep-largest", "costal cartilages", "--grow", "spleen", "3"]) == 0
        capsys.readouterr()
        rows = {row["value"]: row for row in json.loads((tmp_path / "out.labels.json").read_text())["labels"]}
        assert rows[1]["name"] == "spleen" and rows[1]["color"] == [10, 20, 30]
        assert rows[LIVER]["locked"] is True and rows[LIVER]["algorithm_type"] == "AUTOMATIC"  # locked: untouched
        assert rows[1]["algorithm_type"] == "SEMIAUTOMATIC" and rows[1]["algorithm_name"] == "TotalSegmentator"
        assert rows[CARTILAGES]["algorithm_type"] == "SEMIAUTOMATIC"
        before, after = sitk.GetArrayFromImage(sitk.ReadImage(str(labels_path))), read_image(out).array
        assert np.array_equal(after == LIVER, before == LIVER)  # the lock came from the sidecar


def test_edit_still_reads_the_old_flat_sidecar(abdomen_files, tmp_path: Path, capsys):
    image_path, labels_path = abdomen_files
    old = tmp_path / "old.nii.gz"
    sitk.WriteImage(sitk.ReadImage(str(labels_path)), str(old))
    (tmp_path / "old.labels.json").write_text(json.dumps({
        str(LIVER): {"name": "liver", "color": [1, 2, 3], "locked": True}, "1": {"name": "spleen", "color": [4, 5, 6]}}))
    out = tmp_path / "out.nii.gz"
    assert main(["edit", str(image_path), "--labels", str(old), "-o", str(out), "--grow", "spleen", "6"]) == 0
    before, after = sitk.GetArrayFromImage(sitk.ReadImage(str(labels_path))), read_image(out).array
    assert np.array_equal(after == LIVER, before == LIVER) and np.count_nonzero(after == 1) > np.count_nonzero(before == 1)
    rows = {row["value"]: row for row in json.loads((tmp_path / "out.labels.json").read_text())["labels"]}
    assert rows[LIVER]["color"] == [1, 2, 3] and rows[LIVER]["locked"] is True


def test_a_sidecar_with_no_label_map_beside_it_is_named(abdomen_files, tmp_path: Path, capsys):
    image_path, _ = abdomen_files
    (tmp_path / "lonely.labels.json").write_text('{"format": "medseg-labels/1", "labels": []}')
    assert main(["edit", str(image_path), "--labels", str(tmp_path / "lonely.labels.json"), "-o",
                 str(tmp_path / "out.nii.gz"), "--keep-largest", "1"]) == 1
    err = capsys.readouterr().err
    assert "label sidecar" in err and "no label map lies beside it" in err and "lonely.labels.json" in err


def test_the_largest_label_value_is_the_same_for_the_cli_the_document_and_the_files(abdomen_files, tmp_path: Path,
                                                                                       capsys):
    from medseg.core.label_values import MAX_LABEL_VALUE

    image_path, _ = abdomen_files
    out = tmp_path / "bone.nii.gz"
    assert main(["edit", str(image_path), "-o", str(out), "--threshold", "250", "3000", str(MAX_LABEL_VALUE)]) == 0
    written = sitk.ReadImage(str(out))
    assert written.GetPixelID() == sitk.sitkUInt16
    expected = sitk.GetArrayFromImage(sitk.BinaryThreshold(sitk.ReadImage(str(image_path)), 250, 3000)) > 0
    assert np.array_equal(sitk.GetArrayFromImage(written) == 65535, expected) and expected.any()
    assert main(["edit", str(image_path), "-o", str(tmp_path / "x.nii.gz"),
                 "--threshold", "250", "3000", str(MAX_LABEL_VALUE + 1)]) == 1
    assert "outside 1…65535" in capsys.readouterr().err


def test_level_trace_and_lasso_in_batch(ct_dir, tmp_path: Path):
    """The app's level trace and lasso from the command line (catalogue names): the traced region is the
    connected component of |HU - HU(point)| <= tolerance on the point's axial slice (scipy), the lasso
    fills the outline on its slice only (skimage)."""
    from scipy import ndimage
    from skimage.draw import polygon2mask

    image_path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    image = read_image(image_path)
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd").array == 1
    z, y, x = np.rint(np.argwhere(nodule).mean(axis=0)).astype(int)
    point = ",".join(f"{v:.2f}" for v in image.index_to_physical((x, y, z)))
    corners = [(x - 40.3, y - 25.3), (x + 35.2, y - 30.1), (x + 20.4, y + 30.2), (x - 30.2, y + 20.3)]
    outline = tmp_path / "lasso.json"
    outline.write_text(json.dumps({"view": "axial",
                                   "points_lps_mm": [list(image.index_to_physical((cx, cy, z))) for cx, cy in corners]}))
    out = tmp_path / "traced.nii.gz"
    assert main(["edit", str(image_path), "-o", str(out), "--level-trace", point, "axial", "150", "4",
                 "--lasso", str(outline), "9"]) == 0
    written = read_image(out).array
    hu = image.array[z].astype(float)
    within = np.abs(hu - hu[y, x]) <= 150
    components, _ = ndimage.label(within)  # 4-connected in the plane, as the tool's flood
    traced = components == components[y, x]
    lasso = polygon2mask(hu.shape, np.array([(cy, cx) for cx, cy in corners]))
    expected = np.where(lasso, 9, np.where(traced, 4, 0))
    assert np.array_equal(written[z], expected)
    assert not written[np.arange(written.shape[0]) != z].any()  # one slice only
    assert traced.sum() > 20 and (lasso & ~traced).sum() > 100
