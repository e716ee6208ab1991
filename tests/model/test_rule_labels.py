"""Rule-based body / lungs / bones labels on the phantom (known truth) and on real CT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.core.volume import Volume
from medseg.errors import MedsegError
from medseg.io.phantom import Phantom, make_phantom
from medseg.model.rule_labels import STARTER_COLORS, STARTER_LABELS, rule_label_map

BODY, LUNGS, BONES = 1, 2, 3
TS_LUNG_LOBES = [10, 11, 13, 14]
TS_BONES = [30, 31, 32, 33, 69, 70, *range(97, 104), *range(109, 116)]  # vertebrae, humeri, ribs
TS_VESSELS = [52, 63, 64]  # aorta, IVC, portal/splenic vein


def dice(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * float((a & b).sum()) / max(1, int(a.sum() + b.sum()))


def _save_montage(image: Volume, labels: np.ndarray, path: Path, title: str) -> None:
    """Axial, coronal and sagittal mid slices with the rule labels drawn over them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    colours = [(0, 0, 0, 0)] + [(*(c / 255 for c in STARTER_COLORS[v]), alpha) for v, alpha in ((1, 0.3), (2, 0.6), (3, 0.8))]
    overlay = ListedColormap(colours)
    nz, ny, nx = image.shape_zyx
    sx, sy, sz = image.spacing_mm
    views = [(f"axial {k}", image.array[k], labels[k], sy / sx) for k in (nz // 4, nz // 2, 3 * nz // 4)]
    views += [
        ("coronal", image.array[:, ny // 2, :], labels[:, ny // 2, :], sz / sx),
        ("sagittal", image.array[:, :, nx // 2], labels[:, :, nx // 2], sz / sy),
    ]
    figure, axes = plt.subplots(1, len(views), figsize=(4.5 * len(views), 5))
    for axis, (name, hu, label, aspect) in zip(axes, views):
        origin = "upper" if name.startswith("axial") else "lower"  # head up in coronal/sagittal
        axis.imshow(hu, cmap="gray", vmin=-1000, vmax=600, aspect=aspect, origin=origin)
        axis.imshow(label, cmap=overlay, vmin=0, vmax=3, aspect=aspect, origin=origin, interpolation="nearest")
        axis.set_title(name)
        axis.axis("off")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=70)
    plt.close(figure)


# --- the phantom: labels against the truth it was drawn with ------------------------------


@pytest.fixture(scope="module")
def phantom_case() -> tuple[Phantom, np.ndarray]:
    case = make_phantom(seed=3)
    return case, rule_label_map(case.image).array


def test_rule_labels_match_the_phantom_truth(phantom_case: tuple[Phantom, np.ndarray], artifacts_dir: Path) -> None:
    case, labels = phantom_case
    truth = case.label_map.array
    scores = {
        "body": dice(labels > 0, truth > 0),
        "lungs": dice(labels == LUNGS, truth == LUNGS),
        "bones": dice(labels == BONES, truth == BONES),
    }
    _save_montage(case.image, labels, artifacts_dir / "rule_labels_phantom.png", f"rule labels on the phantom, Dice {scores}")
    assert scores["body"] >= 0.95
    assert scores["lungs"] >= 0.90
    assert scores["bones"] >= 0.80


def test_phantom_table_and_bowel_gas_are_not_body_or_lung(phantom_case: tuple[Phantom, np.ndarray]) -> None:
    case, labels = phantom_case
    hu, truth = case.image.array, case.label_map.array
    table = (truth == 0) & (hu > 200)
    assert table.sum() > 10_000 and not (labels[table] > 0).any()
    gas_in_body = (truth == BODY) & (hu < -900)  # stomach and bowel gas, the trachea
    assert gas_in_body.sum() > 2_000
    assert (labels[gas_in_body] == BODY).mean() >= 0.99


def test_label_map_is_uint8_on_the_same_grid_with_the_starter_labels(phantom_case: tuple[Phantom, np.ndarray]) -> None:
    case, _ = phantom_case
    label_map = rule_label_map(case.image)
    assert label_map.same_grid(case.image)
    assert label_map.array.dtype == np.uint8
    assert {v: label.name for v, label in label_map.meta.labels.items()} == STARTER_LABELS == {0: "background", 1: "body", 2: "lungs", 3: "bones"}
    assert set(np.unique(label_map.array)) == {0, 1, 2, 3}
    assert set(STARTER_COLORS) == {1, 2, 3}


def test_an_image_without_air_is_refused() -> None:
    stored_values = Volume(np.full((4, 32, 32), 1024, dtype=np.int16))  # e.g. raw stored values, no rescale
    with pytest.raises(MedsegError, match="Hounsfield"):
        rule_label_map(stored_values)


# --- real CT -------------------------------------------------------------------------------


def _read(path: Path) -> Volume:
    return Volume.from_sitk(sitk.ReadImage(str(path)))


def test_chest_ct_lungs_both_sides_and_the_nodule(ct_dir: Path, artifacts_dir: Path) -> None:
    image = _read(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    nodule = _read(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd").array == 1
    labels = rule_label_map(image).array
    _save_montage(image, labels, artifacts_dir / "rule_labels_lung1.png", "rule labels on pyradiomics lung1 (real chest CT)")
    lungs = labels == LUNGS
    # a 24 cm slab through an adult chest from the apices down: a few litres of lung
    assert 1500 <= lungs.sum() * image.voxel_volume_ml <= 6000
    # both lungs: at least half a litre each side of the body's midline (x grows to the patient's left)
    body_columns = np.nonzero((labels > 0).any(axis=(0, 1)))[0]
    midline = (body_columns.min() + body_columns.max()) // 2
    assert lungs[:, :, :midline].sum() * image.voxel_volume_ml >= 500
    assert lungs[:, :, midline:].sum() * image.voxel_volume_ml >= 500
    # the solid nodule lies inside the lung: the per-slice hole filling makes it lung, as vessels are
    assert (labels[nodule] == LUNGS).mean() >= 0.9
    # the spine: bone in the posterior midline of every slice
    spine_columns = labels[:, :, midline - 20 : midline + 20]
    assert all((spine_columns[z] == BONES).any() for z in range(image.shape_zyx[0]))
    assert 200 <= (labels == BONES).sum() * image.voxel_volume_ml <= 2000


@pytest.fixture(scope="module")
def abdomen(ct_dir: Path) -> tuple[Volume, np.ndarray, np.ndarray]:
    image = _read(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    reference = _read(ct_dir / "totalsegmentator" / "example_seg.nii.gz")
    assert reference.same_grid(image)
    return image, reference.array, rule_label_map(image).array


def test_abdomen_agrees_with_totalsegmentator(abdomen: tuple[Volume, np.ndarray, np.ndarray], artifacts_dir: Path) -> None:
    image, reference, labels = abdomen
    _save_montage(image, labels, artifacts_dir / "rule_labels_example_ct_sm.png", "rule labels on TotalSegmentator example_ct_sm")
    organs = reference > 0
    assert ((labels > 0) & organs).sum() / organs.sum() >= 0.99  # every organ lies inside the body
    lung_lobes = np.isin(reference, TS_LUNG_LOBES)
    assert lung_lobes.sum() * image.voxel_volume_ml > 50  # the lung bases are in this scan
    assert dice(labels == LUNGS, lung_lobes) >= 0.8
    bones, ts_bones = labels == BONES, np.isin(reference, TS_BONES)
    assert (bones & ts_bones).sum() / bones.sum() >= 0.8  # what the rules call bone is bone
    assert dice(bones, ts_bones) >= 0.65  # thin, partial-volumed 3 mm bone: only part is dense enough


def test_abdomen_table_and_bowel_gas_are_left_out(abdomen: tuple[Volume, np.ndarray, np.ndarray]) -> None:
    image, reference, labels = abdomen
    # in patient coordinates (LPS, +y = posterior): what lies more than 2 cm behind the
    # back-most TotalSegmentator structure (the back muscles) is the table, which touches
    # the skin here (with 3 mm voxels its shells read -300 to -450 HU)
    ny = image.shape_zyx[1]
    rows_y = image.index_to_physical(np.stack([np.zeros(ny), np.arange(ny), np.zeros(ny)], axis=1))[:, 1]
    back_y = rows_y[np.nonzero((reference > 0).any(axis=(0, 2)))[0]].max()
    behind = rows_y > back_y + 20.0
    table = image.array[:, behind, :] > -500
    assert table.sum() * image.voxel_volume_ml > 20  # the table is really there
    assert (labels[:, behind, :][table] > 0).mean() <= 0.01
    # gas in the stomach and bowel (TotalSegmentator's stomach/bowel/colon, below -900 HU) is body, not lung
    gut_gas = np.isin(reference, [6, 18, 19, 20]) & (image.array < -900)
    assert gut_gas.sum() * image.voxel_volume_ml > 20
    assert (labels[gut_gas] == BODY).mean() >= 0.95


def test_contrast_enhanced_vessels_are_mostly_not_bone(ct_dir: Path, artifacts_dir: Path) -> None:
    folder = ct_dir / "totalsegmentator" / "example_ct_dicom"
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(folder)))
    ct = reader.Execute()
    # the reference is stored LAS: resample it onto the DICOM grid (data README)
    reference_image = sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_seg_dicom.nii.gz"))
    reference = sitk.GetArrayFromImage(sitk.Resample(reference_image, ct, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
    image = Volume.from_sitk(ct)
    labels = rule_label_map(image).array
    _save_montage(image, labels, artifacts_dir / "rule_labels_example_ct_dicom.png", "rule labels on example_ct_dicom (IV contrast)")
    vessels = np.isin(reference, TS_VESSELS)
    assert np.median(image.array[reference == 52]) > 120  # the aorta is contrast-enhanced
    assert (labels[vessels] == BONES).mean() <= 0.15  # calcified plaque and walls touching bone (11 % measured)
    bones, ts_bones = labels == BONES, np.isin(reference, TS_BONES)
    assert dice(bones, ts_bones) >= 0.65
    organs = reference > 0
    assert ((labels > 0) & organs).sum() / organs.sum() >= 0.99
    # Below the lung bases: TotalSegmentator finds no lung here, and the gas in the stomach and
    # transverse colon (13-17 ml pockets, 45 % of their voxels below -950 HU at 3 mm slices) is body.
    assert not np.isin(reference, TS_LUNG_LOBES).any()
    assert not (labels == LUNGS).any()
    gut_gas = np.isin(reference, [6, 20]) & (image.array < -900)
    assert gut_gas.sum() * image.voxel_volume_ml > 10
    assert (labels[gut_gas] == BODY).mean() >= 0.95


def test_the_air_of_the_nose_and_sinuses_in_a_head_is_not_lung(ct_dir: Path, artifacts_dir: Path) -> None:
    # A real head CT (GE, gantry tilt): the nasal cavity and sinuses hold 26 ml of air
    # partial-volumed with mucosa (median about -760 HU), which the volume and pure-gas rules
    # alone took for lung; a head holds no lung.
    from medseg.io import load

    image = load(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")
    labels = rule_label_map(image).array
    _save_montage(image, labels, artifacts_dir / "rule_labels_ge_head.png", "rule labels on a head CT (GE, tilt)")
    air_in_head = (image.array < -400) & (labels == BODY)
    assert air_in_head.sum() * image.voxel_volume_ml > 20  # the air is there, and it is body
    assert not (labels == LUNGS).any()
    assert (labels == BONES).sum() * image.voxel_volume_ml > 100  # the skull
