"""Preprocessing and export as torch operations (issue #27), against scipy and nnU-Net on real CT.

* the torch path on the CPU device against the scipy path it replaced (``resample_image``:
  scipy.ndimage.zoom order 3, the reference nnU-Net's default resampling is): stated
  tolerance 1e-6 on normalised intensities (a few float32 ulps; bitwise equal where measured);
* plans made by nnU-Net's ``*_torchres`` planners (``resample_torch_fornnunet``):
  preprocessing equal to nnU-Net's own preprocessor, labels equal to its predictor's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from infer_fixtures import (
    ABDOMEN,
    ABDOMEN_WIDER,
    CHEST,
    crop_volume,
    ct_crop,
    nnunet_array,
    nnunet_preprocessed,
    scipy_preprocessed,
    small_model_folder,
)
from nnunet_fixture import make_nnunet_result_folder
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

from medseg.core.volume import Volume
from medseg.model import device_resample
from medseg.model import preprocess as pp
from medseg.model.infer import segment
from medseg.model.nnunet_import import import_nnunet

torch.set_num_threads(2)

# The torch path on the CPU against scipy: normalised CT intensities span about -6..7, where one
# float32 ulp is at most 4.8e-7; the stated tolerance is 1e-6 (measured: bitwise equal).
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return import_nnunet(small_model_folder(tmp_path_factory.mktemp("nnunet"))).configurations["3d_fullres"]


# (crop, plan spacing): the 3 mm abdomen on the 3 x 1.5 x 1.5 plan is a 3D cubic zoom of two axes,
# on a 2 x 1.5 x 1.5 plan of all three; the 5 mm chest (0.57 mm pixels) is resized in-plane slice
# by slice with nearest neighbour across (separate z), on a 2 mm plan with z upsampled too
CASES = {"abdomen-3d-zoom": (ABDOMEN_WIDER, (3.0, 1.5, 1.5)), "abdomen-3d-zoom-every-axis": (ABDOMEN_WIDER, (2.0, 1.5, 1.5)),
         "chest-separate-z": (CHEST, (3.0, 1.5, 1.5)), "chest-separate-z-upsampled": (CHEST, (2.0, 1.0, 1.0))}


@pytest.mark.parametrize("case", CASES)
def test_torch_preprocessing_on_the_cpu_equals_the_scipy_path(ct_dir, tmp_path, case):
    which, spacing = CASES[case]
    folder = make_nnunet_result_folder(tmp_path, spacing_zyx=spacing, base_features=4, n_stages=3)
    plan = import_nnunet(folder).configurations["3d_fullres"]
    volume = crop_volume(ct_dir, which)
    expected = scipy_preprocessed(volume, plan)
    prep = pp.preprocess_to(volume, plan, "cpu")
    assert isinstance(prep.data, torch.Tensor) and prep.data.dtype == torch.float32
    got = prep.data.numpy()
    assert got.shape == expected.shape
    resized = [a for a in range(3) if got.shape[1 + a] != volume.shape_zyx[a]]
    assert len(resized) >= 2  # the case really resamples
    difference = float(np.abs(got - expected).max())
    assert difference <= TOLERANCE, f"max |torch - scipy| = {difference:g}"


def test_int16_ct_goes_to_the_device_as_stored_and_gives_the_float_result(plan, ct_dir):
    """The CT travels as int16 (half the bytes of float32) and is normalised slab by slab."""
    volume = crop_volume(ct_dir, CHEST)
    as_int16 = volume.with_array(volume.array.astype(np.int16))
    as_float = volume.with_array(volume.array.astype(np.float32))
    assert np.array_equal(pp.preprocess(as_int16, plan).data, pp.preprocess(as_float, plan).data)


@pytest.mark.parametrize("which", [ABDOMEN_WIDER, CHEST], ids=["3d-zoom", "separate-z"])
def test_preprocessing_leaves_a_float_volume_unchanged(plan, ct_dir, which):
    """On the CPU a float32 CT reaches the torch path as a view of the Volume's array; normalising in place
    there would change the user's image (it did, before this test)."""
    volume = crop_volume(ct_dir, which)
    as_float = volume.with_array(volume.array.astype(np.float32))
    before = as_float.array.copy()
    prep = pp.preprocess(as_float, plan)
    assert np.array_equal(as_float.array, before)
    assert np.array_equal(prep.data, pp.preprocess(volume, plan).data)


def test_slabs_of_any_size_give_the_same_image(plan, ct_dir, monkeypatch):
    volume = crop_volume(ct_dir, ABDOMEN_WIDER)
    whole = pp.preprocess(volume, plan).data
    monkeypatch.setitem(device_resample.SLAB_BYTES, "cpu", 200_000)  # a few planes per slab
    assert np.array_equal(pp.preprocess(volume, plan).data, whole)


def test_banded_operator_equals_the_dense_one():
    """Skipping the weights below 1e-20 of the largest changes nothing in float64."""
    rng = np.random.default_rng(0)
    signal = rng.normal(size=(7, 300))
    for n_in, n_out in ((300, 157), (300, 511), (300, 300)):
        operator = device_resample.axis_operator(n_in, n_out, 3, "cpu", torch.float64)
        banded = device_resample.apply_axis(torch.from_numpy(signal[:, :n_in]), 1, operator).numpy()
        dense = signal[:, :n_in] @ device_resample.spline_operator(n_in, n_out, 3).T
        assert np.abs(banded - dense).max() < 1e-13  # equal up to float64 rounding


# --- plans made by nnU-Net's *_torchres planners -------------------------------------------------------


def _torchres_folder(folder, force_separate_z):
    plans = json.loads((folder / "plans.json").read_text())
    config = plans["configurations"]["3d_fullres"]
    kwargs = {"is_seg": False, "force_separate_z": force_separate_z, "memefficient_seg_resampling": False}
    for key in ("resampling_fn_data", "resampling_fn_seg", "resampling_fn_probabilities"):
        config[key] = "resample_torch_fornnunet"
        config[f"{key}_kwargs"] = {**kwargs, "is_seg": key == "resampling_fn_seg"}
    (folder / "plans.json").write_text(json.dumps(plans, indent=2))
    return folder


# nnUNetPlannerResEncL_torchres / nnUNetPlanner_torchres force no separate axis (trilinear everywhere);
# nnUNetPlannerResEncL_torchres_sepz leaves it to the anisotropy rule (bilinear + nearest-exact)
TORCHRES = {"torchres": False, "torchres-sepz": None}


@pytest.fixture(scope="module", params=list(TORCHRES))
def torchres_folder(request, tmp_path_factory):
    return _torchres_folder(small_model_folder(tmp_path_factory.mktemp(request.param)), TORCHRES[request.param])


def test_torchres_plan_imports_as_torch_resampling(torchres_folder):
    plan = import_nnunet(torchres_folder).configurations["3d_fullres"]
    assert plan.resampling["data"]["function"] == "resample_torch_fornnunet"
    assert plan.resampling["probabilities"]["function"] == "resample_torch_fornnunet"


@pytest.mark.parametrize("which", [ABDOMEN, CHEST], ids=["abdomen-3mm", "chest-5mm-anisotropic"])
def test_torchres_preprocessing_equals_nnunets(torchres_folder, ct_dir, which):
    image = ct_crop(ct_dir, which)
    expected, _, _, _ = nnunet_preprocessed(torchres_folder, image)
    plan = import_nnunet(torchres_folder).configurations["3d_fullres"]
    prep = pp.preprocess(Volume.from_sitk(image), plan)
    assert prep.data.shape == expected.shape
    assert np.array_equal(prep.data, expected)


@pytest.mark.parametrize("which", [ABDOMEN_WIDER, CHEST], ids=["abdomen-3mm", "chest-5mm-anisotropic"])
def test_torchres_labels_agree_with_nnunet_predictor(torchres_folder, ct_dir, which):
    image = ct_crop(ct_dir, which)
    predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)
    predictor.initialize_from_trained_model_folder(str(torchres_folder), use_folds=(0,))
    expected = predictor.predict_single_npy_array(*nnunet_array(image), None, None, False)
    labels = segment(Volume.from_sitk(image), import_nnunet(torchres_folder), device="cpu").label_map.array
    assert labels.shape == expected.shape
    assert np.bincount(expected.ravel(), minlength=3).min() > 0.05 * expected.size  # several labels to get right
    agreement = float((labels == expected).mean())
    assert agreement >= 0.9999, f"voxel agreement {agreement:.6f}"
