"""medseg.model.totalseg's pieces against their oracles: nibabel's reorientation, scipy's zoom and
TotalSegmentator's own resampling and crop functions; the conversion, the choice and the refusals."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage
from ts_fixture import make_totalseg_weights

from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model.totalseg import (
    choose_configuration,
    import_totalsegmentator_task,
    is_totalseg_model,
    load_totalseg_model,
    structure_values,
)
from medseg.model.totalseg.geometry import (
    canonical_orientation,
    crop_box,
    header_zooms,
    nearest_zoom_indices,
    resample_labels_back,
    resample_to_spacing,
)


def _rotation(axis: int, degrees: float) -> np.ndarray:
    c, s = np.cos(np.radians(degrees)), np.sin(np.radians(degrees))
    i, j = [a for a in range(3) if a != axis]
    matrix = np.eye(3)
    matrix[i, i], matrix[i, j], matrix[j, i], matrix[j, j] = c, -s, s, c
    return matrix


DIRECTIONS = {
    "lps": np.eye(3),
    "las": np.diag([1.0, -1.0, 1.0]),
    "ras-permuted": np.array([[0, 0, -1], [-1, 0, 0], [0, 1, 0]], float),
    "tilted-20": _rotation(0, 20.0),
    "oblique-40": _rotation(2, 40.0) @ _rotation(0, 25.0) @ np.diag([1.0, -1.0, -1.0]),
}


def nifti_of(volume: Volume) -> nib.Nifti1Image:
    """The NIfTI nibabel would read for this volume: (x, y, z) array, RAS affine."""
    affine = np.eye(4)
    lps_to_ras = np.diag([-1.0, -1.0, 1.0])
    affine[:3, :3] = lps_to_ras @ volume.direction @ np.diag(volume.spacing_mm)
    affine[:3, 3] = lps_to_ras @ np.asarray(volume.origin_mm)
    return nib.Nifti1Image(volume.array.T.astype(np.float64), affine)


@pytest.mark.parametrize("name", list(DIRECTIONS))
def test_canonical_orientation_is_nibabels(name):
    rng = np.random.default_rng(1)
    volume = Volume(rng.integers(-1000, 1000, (7, 9, 11)).astype(np.int16), (0.8, 0.9, 2.5), (1, 2, 3),
                    DIRECTIONS[name])
    expected = nib.as_closest_canonical(nifti_of(volume))
    canonical = canonical_orientation(volume)
    got = canonical.apply_xyz(volume.array.T)
    assert np.array_equal(got, expected.get_fdata())
    assert np.allclose(canonical.zooms(header_zooms(volume)), expected.header.get_zooms(), rtol=1e-6)
    assert np.array_equal(canonical.undo_xyz(got), volume.array.T)


@pytest.mark.parametrize("n_in,n_out", [(30, 61), (61, 30), (100, 100), (97, 512), (512, 171), (5, 1), (1, 4)])
def test_label_zoom_back_is_scipys_order_0(n_in, n_out):
    source = np.arange(n_in, dtype=np.uint8)
    expected = ndimage.zoom(source, n_out / n_in, order=0, mode="nearest")
    assert len(expected) == n_out
    assert np.array_equal(source[nearest_zoom_indices(n_in, n_out)], expected)
    labels = np.random.default_rng(2).integers(0, 118, (n_in, 7, 5)).astype(np.uint8)
    assert np.array_equal(resample_labels_back(labels, (n_out, 13, 3)),
                          ndimage.zoom(labels.astype(float), (n_out / n_in, 13 / 7, 3 / 5), order=0, mode="nearest"))


@pytest.mark.parametrize("spacing", [(0.57, 0.57, 5.0), (3.0, 3.0, 3.0), (1.5, 1.5, 1.5), (0.977, 0.977, 2.0)])
@pytest.mark.parametrize("target", [1.5, 3.0, 6.0])
def test_input_resampling_is_totalsegmentators(spacing, target):
    from totalsegmentator.resampling import change_spacing

    rng = np.random.default_rng(3)
    volume = Volume(rng.integers(-1024, 1500, (12, 40, 36)).astype(np.int16), spacing)
    image = nifti_of(volume)
    expected = change_spacing(image, [target] * 3, order=1, dtype=np.int32)
    got = resample_to_spacing(volume.array.T, header_zooms(volume), target)
    assert got.shape == expected.shape
    assert np.array_equal(got, np.asanyarray(expected.dataobj))


def test_crop_box_is_totalsegmentators():
    from totalsegmentator.cropping import crop_to_mask

    volume = Volume(np.zeros((40, 60, 50), np.int16), (0.7, 0.8, 3.0), direction=DIRECTIONS["las"])
    mask = np.zeros(volume.shape_zyx, np.uint8)
    mask[10:12, 20:44, 3:9] = 1
    _, bbox = crop_to_mask(nifti_of(volume), nib.Nifti1Image(mask.T.astype(float), np.eye(4)), addon=[20, 20, 20])
    assert crop_box(mask.T, header_zooms(volume), 20.0) == tuple(slice(a, b) for a, b in bbox)
    assert crop_box(np.zeros((4, 4, 4), bool), np.ones(3), 20.0) is None


# --- the conversion --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fast_weights(tmp_path_factory):
    return make_totalseg_weights(tmp_path_factory.mktemp("w") / "weights", [297, 298], patch_size=(32, 32, 32),
                                 n_stages=3)


def test_conversion_makes_the_configurations_whose_weights_are_there(fast_weights, tmp_path):
    home = tmp_path / "home"  # a TotalSegmentator home holds its weights under nnunet/results
    (home / "nnunet").mkdir(parents=True)
    (home / "nnunet" / "results").symlink_to(fast_weights, target_is_directory=True)
    folder = import_totalsegmentator_task(home, tmp_path / "model")
    assert is_totalseg_model(folder) and not is_totalseg_model(tmp_path)
    model = load_totalseg_model(folder)
    assert list(model.configurations) == ["3mm", "6mm"]  # no 1.5 mm parts were installed
    assert model.labels[1] == "spleen" and model.labels[117] == "costal_cartilages" and len(model.labels) == 117
    assert model.crop_part is model.configurations["6mm"].parts[0]
    part = model.configurations["3mm"].parts[0]
    assert part.plan.orientation == "RAS"  # NibabelIOWithReorient
    loaded = part.load()  # the weights only when a run needs them
    assert loaded.num_classes == 118 and loaded.weights["3d_fullres"][0]
    manifest = json.loads((folder / "totalseg.json").read_text())
    assert manifest["configurations"]["3mm"]["flag"] == "--fast" and manifest["configurations"]["3mm"]["step"] == 0.8
    assert len(manifest["provenance"]["datasets"]["297"]["checkpoint_sha256"]["fold_0"]) == 64


def test_conversion_refusals(fast_weights, tmp_path):
    with pytest.raises(ModelError, match="no TotalSegmentator weights"):
        import_totalsegmentator_task(tmp_path, tmp_path / "model")
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ModelError, match="not a TotalSegmentator model"):
        import_totalsegmentator_task(fast_weights, other)
    assert (other / "notes.txt").read_text() == "keep me"
    only_part = tmp_path / "parts"
    make_totalseg_weights(only_part, [291], patch_size=(32, 32, 32), n_stages=3)
    with pytest.raises(ModelError, match="1.5mm lacks Dataset292"):
        import_totalsegmentator_task(only_part, tmp_path / "model")
    # a network whose label values are not what the task expects of it is refused, naming the file
    # (TotalSegmentator uses the values only: its class maps name them): 291's folder given as 292
    dataset_json = next(only_part.glob("Dataset291_*/*/dataset.json"))
    from medseg.model.totalseg.convert import convert_network
    from medseg.model.totalseg.tasks import task_spec

    total = task_spec("total")
    vertebrae = total.modes["default"].networks[1]
    with pytest.raises(ModelError, match="dataset 292 does not predict TotalSegmentator's 26 'total' classes") as error:
        convert_network(dataset_json.parent, vertebrae, total.modes["default"], total)
    assert error.value.path == dataset_json


def test_choice_follows_spacing_and_the_devices_budget(fast_weights, tmp_path):
    model = load_totalseg_model(import_totalsegmentator_task(fast_weights, tmp_path / "model"))
    thick = Volume(np.zeros((60, 64, 64), np.int16), (0.7, 0.7, 5.0))
    thin = Volume(np.zeros((60, 64, 64), np.int16), (0.7, 0.7, 1.0))
    choice = choose_configuration(model, thick, "cpu", budget_s=1e9)
    assert choice.name == "3mm" and "5 mm apart" in choice.reason
    assert set(choice.estimates_s) == {"3mm", "6mm"} and choice.estimates_s["3mm"] > choice.estimates_s["6mm"] > 0
    assert choose_configuration(model, thin, "cpu", budget_s=1e9).name == "3mm"  # the finest installed
    tight = choose_configuration(model, thick, "cpu", budget_s=choice.estimates_s["6mm"] * 1.01)
    assert tight.name == "6mm" and "over the budget" in tight.reason
    assert choose_configuration(model, thick, "cpu", forced="6mm").reason == "asked for"
    with pytest.raises(ModelError, match="no configuration '1.5mm'"):
        choose_configuration(model, thick, "cpu", forced="1.5mm")
    with pytest.raises(ModelError, match="unknown structure.*livr"):
        structure_values(model, ["liver", "livr"])
    assert structure_values(model, ["spleen", "liver"]) == [1, 5]


def test_cli_writes_a_dicom_seg_with_totalsegmentators_names(fast_weights, ct_dir, tmp_path, capsys):
    from medseg.cli import main
    from medseg.io import load
    from medseg.io.segmentations import open_segmentation

    model_dir = import_totalsegmentator_task(fast_weights, tmp_path / "model")
    series = ct_dir / "totalsegmentator" / "example_ct_dicom"
    output = tmp_path / "seg.dcm"
    assert main(["segment", str(series), "--model", str(model_dir), "--fastest", "-o", str(output),
                 "--device", "cpu", "--json"]) == 0
    done = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert done["configuration"] == "6mm" and done["model"] == "totalsegmentator/total"
    from medseg import threads

    assert done["threads"] == threads.budget()  # a lone job computes with the whole budget (issue #40)
    opened = open_segmentation(output, load(series))
    names = {label.value: label.name for label in opened.segments}
    model = load_totalseg_model(model_dir)
    assert len(names) >= 5 and all(model.labels[value] == name for value, name in names.items())
    assert set(np.unique(opened.label_map.array)) - {0} == set(names)
    # the options of TotalSegmentator models are refused for the others, before anything runs
    assert main(["segment", str(series), "--fast", "-o", str(tmp_path / "x.nii.gz")]) == 1
    assert "apply to TotalSegmentator models only" in capsys.readouterr().err
