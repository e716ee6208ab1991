"""Preprocessing and its inverse against nnU-Net v2's own functions, on real CT."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from infer_fixtures import ABDOMEN, CHEST, crop_volume, ct_crop, nnunet_preprocessed, small_model_folder
from nnunetv2.inference.export_prediction import convert_predicted_logits_to_segmentation_with_correct_shape
from nnunetv2.preprocessing.cropping.cropping import crop_to_nonzero
from nnunetv2.preprocessing.resampling.default_resampling import resample_data_or_seg_to_shape

from medseg.core.volume import Volume
from medseg.model import logits_grid as lg
from medseg.model import preprocess as pp
from medseg.model.nnunet_import import import_nnunet

CASES = [ABDOMEN, CHEST]
IDS = ["abdomen-3mm-isotropic", "chest-5mm-anisotropic"]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return small_model_folder(tmp_path_factory.mktemp("nnunet"))


@pytest.fixture(scope="module")
def plan(model_folder):
    return import_nnunet(model_folder).configurations["3d_fullres"]


def _nnunet_preprocess(model_folder, image):
    data, properties, plans, _ = nnunet_preprocessed(model_folder, image)
    return data, properties, plans


@pytest.mark.parametrize("which", CASES, ids=IDS)
def test_preprocessed_image_equals_nnunets(model_folder, plan, ct_dir, which):
    image = ct_crop(ct_dir, which)
    expected, properties, _ = _nnunet_preprocess(model_folder, image)
    prep = pp.preprocess(Volume.from_sitk(image), plan)
    assert prep.data.dtype == np.float32 and prep.data.shape == expected.shape
    assert np.array_equal(prep.data, expected)
    assert prep.shape_after_crop == tuple(properties["shape_after_cropping_and_before_resampling"])


@pytest.mark.parametrize("which", CASES, ids=IDS)
def test_crop_to_nonzero_matches_nnunet(ct_dir, which):
    array = crop_volume(ct_dir, which).array.astype(np.float32)
    framed = np.pad(array, ((2, 3), (4, 0), (0, 5)))  # a scanner's zero padding around the FOV
    framed[3, 10:20, 10:20] = 0  # and a zero hole inside, which nnU-Net fills
    _, _, bbox = crop_to_nonzero(framed[None])
    assert pp.nonzero_bbox(framed[None]) == tuple(slice(a, b) for a, b in bbox)


@pytest.mark.parametrize("which", CASES, ids=IDS)
@pytest.mark.parametrize("slab_voxels", [lg.SLAB_VOXELS, 50_000])
def test_logits_back_to_original_grid_equal_nnunets(model_folder, plan, ct_dir, which, slab_voxels, monkeypatch):
    """Slab-wise resampling (any slab size) gives nnU-Net's labels, separate-z or not."""
    monkeypatch.setattr(lg, "SLAB_VOXELS", slab_voxels)
    image = ct_crop(ct_dir, which)
    _, properties, plans = _nnunet_preprocess(model_folder, image)
    prep = pp.preprocess(Volume.from_sitk(image), plan)
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn((3, *prep.data.shape[1:]), generator=generator).half()
    configuration = plans.get_configuration("3d_fullres")
    label_manager = plans.get_label_manager(json.loads((model_folder / "dataset.json").read_text()))
    expected = convert_predicted_logits_to_segmentation_with_correct_shape(
        logits.clone(), plans, configuration, label_manager, properties)
    labels = lg.logits_to_label_map(logits, prep)
    assert labels.shape == expected.shape == image.GetSize()[::-1]
    assert (labels == expected).mean() >= 0.99999


def test_resampling_matches_nnunet_on_a_full_slice_stack(ct_dir):
    """The image resampling alone, both directions of separate-z and the plain 3D case."""
    array = crop_volume(ct_dir, CHEST).array.astype(np.float32)[None]
    spacing = (5.0, 0.5703125, 0.5703125)
    for target in [(3.0, 1.5, 1.5), (5.0, 0.8, 0.8), (1.0, 1.0, 1.0)]:
        shape = pp.compute_new_shape(array.shape[1:], spacing, target)
        expected = resample_data_or_seg_to_shape(array, shape, spacing, target, False, 3, 0, None)
        assert np.array_equal(pp.resample_image(array, shape, spacing, target), expected), target
    assert pp.separate_axis(spacing, (1.0, 1.0, 1.0)) == 0
    assert pp.separate_axis((1.0, 0.8, 0.8), (1.5, 1.5, 1.5)) is None


@pytest.mark.parametrize("transpose", [(0, 1, 2), (1, 0, 2), (2, 1, 0)])
def test_round_trip_lands_on_the_input_grid(plan, ct_dir, transpose):
    """Threshold a real CT in network space, map it back: it must match the threshold
    applied on the input grid (only the resampling blurs the edges), for transposed plans too."""
    volume = crop_volume(ct_dir, ABDOMEN)
    volume = volume.with_array(np.pad(volume.array[:, 4:, 6:], ((0, 0), (0, 4), (0, 6))))  # zero frame: cropped
    transposed = dataclasses.replace(plan, transpose_forward=list(transpose), transpose_backward=list(np.argsort(transpose)))
    prep = pp.preprocess(volume, transposed)
    bone = torch.from_numpy(prep.data[0] > (200 - 68.5) / 176.3)  # 200 HU in the fixture's normalization
    logits = torch.stack([(~bone).half(), bone.half()])
    labels = lg.logits_to_label_map(logits, prep)
    expected = volume.array > 200
    assert labels.shape == volume.shape_zyx
    assert (labels.astype(bool) == expected).mean() > 0.97
    assert not labels[:, -4:, :].any() and not labels[:, :, -6:].any()  # the cropped frame is background
