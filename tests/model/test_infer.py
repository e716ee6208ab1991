"""Sliding-window inference against nnU-Net v2's own implementation, fallbacks and cancel."""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from infer_fixtures import ABDOMEN, crop_volume, small_model_folder
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
from nnunetv2.inference.sliding_window_prediction import compute_gaussian, compute_steps_for_sliding_window

from medseg.errors import Cancelled, DeviceError
from medseg.model import infer
from medseg.model.infer import segment
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import build_networks
from medseg.model.preprocess import preprocess
from medseg.model.sliding_window import gaussian_importance_map, sliding_window_logits
from medseg.model.tiling import compute_steps, tile_slicers
from medseg.progress import CancelToken

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return small_model_folder(tmp_path_factory.mktemp("nnunet"))


@pytest.fixture(scope="module")
def package(model_folder):
    return import_nnunet(model_folder)


@pytest.fixture(scope="module")
def abdomen(ct_dir):
    return crop_volume(ct_dir, ABDOMEN)


def _predictor(step: float = 0.5, mirroring: bool = False) -> nnUNetPredictor:
    return nnUNetPredictor(tile_step_size=step, use_gaussian=True, use_mirroring=mirroring,
                           perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)


@pytest.mark.parametrize("step", [0.5, 0.8, 1.0])
def test_tile_starts_match_nnunet(step):
    for size, patch in itertools.product([64, 65, 100, 127, 203, 512], [32, 64, 96]):
        if size >= patch:
            assert compute_steps([size], [patch], step) == compute_steps_for_sliding_window((size,), (patch,), step)


@pytest.mark.parametrize("image_shape,patch", [((40, 130, 150), (32, 64, 64)), ((5, 100, 70), (64, 48))])
def test_tile_order_matches_nnunet(image_shape, patch):
    predictor = _predictor()
    predictor.configuration_manager = SimpleNamespace(patch_size=list(patch))
    expected = predictor._internal_get_sliding_window_slicers(image_shape)
    assert tile_slicers(image_shape, patch, 0.5) == expected


def test_gaussian_matches_nnunet_bitwise():
    for patch in [(32, 64, 64), (128, 128, 128), (64, 48)]:
        theirs = compute_gaussian(patch, sigma_scale=1.0 / 8, value_scaling_factor=10, device=torch.device("cpu"))
        mine = gaussian_importance_map(patch)
        assert mine.dtype == torch.float16
        assert torch.equal(mine, theirs)
        assert float(mine.min()) > 0  # underflowed corners were replaced


def test_sliding_window_logits_match_nnunet(model_folder, package, abdomen):
    plan = package.configurations["3d_fullres"]
    image = torch.from_numpy(preprocess(abdomen, plan).data)
    predictor = _predictor()
    predictor.initialize_from_trained_model_folder(str(model_folder), use_folds=(0,))
    expected = predictor.predict_sliding_window_return_logits(image)
    network = build_networks(package, "3d_fullres")[0]
    seen = []
    logits = sliding_window_logits(network, image, plan, progress=seen.append)
    assert logits.dtype == torch.float16 and logits.shape == expected.shape
    assert torch.allclose(logits.float(), expected.float(), atol=2e-2, rtol=1e-2)
    assert (logits.argmax(0) == expected.argmax(0)).float().mean() >= 0.9999
    n_tiles = len(tile_slicers(_padded(image.shape[1:], plan.patch_size), plan.patch_size, 0.5))
    assert [p.text for p in seen][-1] == f"tile {n_tiles} of {n_tiles}"


def test_padding_and_mirroring_match_nnunet(model_folder, package, abdomen):
    """An image thinner than the patch (padded, as nnU-Net) with mirroring TTA over all axes."""
    plan = package.configurations["3d_fullres"]
    image = torch.from_numpy(preprocess(abdomen, plan).data)[:, :20, :60, :64].contiguous()
    predictor = _predictor(mirroring=True)
    predictor.initialize_from_trained_model_folder(str(model_folder), use_folds=(0,))
    expected = predictor.predict_sliding_window_return_logits(image)
    network = build_networks(package, "3d_fullres")[0]
    logits = sliding_window_logits(network, image, plan, mirror_axes=(0, 1, 2))
    assert logits.shape == expected.shape == (3, 20, 60, 64)
    assert torch.allclose(logits.float(), expected.float(), atol=2e-2, rtol=1e-2)


def _padded(shape, patch):
    return [max(s, p) for s, p in zip(shape, patch)]


class _CountingRunner:
    """Wraps a network; can refuse batches above a size with an out-of-memory error."""

    def __init__(self, network, max_batch: int | None = None):
        self.network, self.max_batch, self.calls = network, max_batch, []
        self.name, self.device = "fake-gpu", torch.device("cpu")

    def __call__(self, tiles):
        if self.max_batch is not None and tiles.shape[0] > self.max_batch:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.calls.append(tiles.shape[0])
        with torch.inference_mode():
            return self.network(tiles)


def test_out_of_memory_halves_tiles_per_pass_and_says_so(package, abdomen):
    plan = package.configurations["3d_fullres"]
    image = torch.from_numpy(preprocess(abdomen, plan).data)
    network = build_networks(package, "3d_fullres")[0]
    reference = sliding_window_logits(network, image, plan, tile_batch=1)
    runner, fallbacks = _CountingRunner(network, max_batch=1), []
    logits = sliding_window_logits(runner, image, plan, tile_batch=4, fallbacks=fallbacks)
    assert fallbacks == ["out of memory on fake-gpu: now 2 tile(s) per pass", "out of memory on fake-gpu: now 1 tile(s) per pass"]
    n_tiles = len(tile_slicers(_padded(image.shape[1:], plan.patch_size), plan.patch_size, 0.5))
    assert set(runner.calls) == {1} and len(runner.calls) == n_tiles
    assert torch.allclose(logits.float(), reference.float(), atol=1e-2)


def test_out_of_memory_while_stitching_on_device_moves_the_sums_to_host(package, abdomen):
    plan = package.configurations["3d_fullres"]
    image = torch.from_numpy(preprocess(abdomen, plan).data)
    network = build_networks(package, "3d_fullres")[0]
    reference = sliding_window_logits(network, image, plan)
    runner, fallbacks = _CountingRunner(network), []
    real_call = runner.__call__

    class FailsOnce:
        name, device, failed = "fake-gpu", torch.device("cpu"), False

        def __call__(self, tiles):
            if len(runner.calls) == 1 and not self.failed:  # the second tile hits a full device
                self.failed = True
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
            return real_call(tiles)

    logits = sliding_window_logits(FailsOnce(), image, plan, accumulate_on_device=True, fallbacks=fallbacks)
    assert fallbacks == ["out of memory stitching on fake-gpu: stitching in host memory"]
    assert torch.equal(logits, reference)


def test_cancel_stops_between_tiles(package, abdomen):
    plan = package.configurations["3d_fullres"]
    image = torch.from_numpy(preprocess(abdomen, plan).data)
    runner, token = _CountingRunner(build_networks(package, "3d_fullres")[0]), CancelToken()

    def cancel_after_first(progress):
        if progress.text.startswith("tile 1 "):
            token.cancel()

    with pytest.raises(Cancelled):
        sliding_window_logits(runner, image, plan, progress=cancel_after_first, cancel=token)
    assert len(runner.calls) == 1  # stopped at the next tile boundary; the second tile never ran


def test_segment_cancel_returns_nothing(package, abdomen):
    token, stages = CancelToken(), []

    def cancel_on_first_tile(progress):
        stages.append(progress.stage)
        if progress.stage == "tile":
            token.cancel()

    with pytest.raises(Cancelled):
        segment(abdomen, package, device="cpu", progress=cancel_on_first_tile, cancel=token)
    assert stages.count("tile") == 1 and "resample" not in stages


def test_segment_result_geometry_labels_and_volumes(package, abdomen):
    result = segment(abdomen, package, device="cpu")
    label_map = result.label_map
    assert label_map.same_grid(abdomen) and label_map.array.dtype == np.uint8
    assert {v: label.name for v, label in label_map.meta.labels.items()} == {0: "background", 1: "liver", 2: "spleen"}
    assert result.device_used == "cpu" and result.configuration == "3d_fullres" and result.fallbacks == []
    counts = np.bincount(label_map.array.ravel(), minlength=3)
    assert result.volumes_ml == {
        "liver": pytest.approx(counts[1] * abdomen.voxel_volume_ml),
        "spleen": pytest.approx(counts[2] * abdomen.voxel_volume_ml),
    }


def test_failed_device_falls_back_to_cpu_and_reports_it(package, abdomen, monkeypatch):
    def broken_runtime(*args, **kwargs):
        raise DeviceError("ONNX Runtime could not load the model on onnx-cpu: simulated")

    monkeypatch.setattr(infer.backends, "OnnxRunner", broken_runtime)
    result = segment(abdomen, package, device="onnx-cpu")
    assert result.device_used == "cpu"
    assert len(result.fallbacks) == 1 and result.fallbacks[0].startswith("onnx-cpu failed (")
    assert result.fallbacks[0].endswith("running on the CPU instead")


def test_probabilities_on_request(package, abdomen):
    result = segment(abdomen, package, device="cpu", return_probabilities=True)
    probabilities = result.probabilities
    assert probabilities.shape == (3, *abdomen.shape_zyx)
    assert np.allclose(probabilities.sum(axis=0), 1.0, atol=1e-3)
    agreement = (probabilities.argmax(axis=0) == result.label_map.array).mean()
    assert agreement >= 0.999  # float32 softmax vs float16 argmax: only near-ties may differ


# --- the tile count the Segment panel announces --------------------------------------------------------------


def _plan_variants():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from small_packages import starter_like_package

    configurations = starter_like_package().configurations
    thick = configurations["3d_thick"]
    transposed = dataclasses.replace(  # an nnU-Net-style plan that moves x first (spacing in that order)
        thick, name="transposed", transpose_forward=[2, 0, 1], transpose_backward=[1, 2, 0],
        target_spacing_transposed=(1.5, 5.0, 1.5), patch_size=tuple(thick.patch_size[i] for i in (2, 0, 1)))
    transposed = dataclasses.replace(transposed, strides=[[s[i] for i in (2, 0, 1)] for s in thick.strides],
                                     kernel_sizes=[[k[i] for i in (2, 0, 1)] for k in thick.kernel_sizes])
    return {**configurations, "transposed": transposed,
            "2d_lps": dataclasses.replace(configurations["2d"], name="2d_lps", orientation="LPS")}


@pytest.mark.parametrize("series", ["pyradiomics_lung1/lung1_image.nrrd", "totalsegmentator/example_ct_sm.nii.gz",
                                    "lung1 stored sagittal"])
@pytest.mark.parametrize("configuration", ["2d", "3d_thin", "3d_thick", "transposed", "2d_lps"])
def test_plan_tiles_is_what_the_sliding_window_runs(ct_dir, series, configuration):
    """plan_tiles (from the geometry alone) against the real preprocess and the real sliding window."""
    import SimpleITK as sitk

    from medseg.core.volume import Volume
    from medseg.io import load
    from medseg.model.tiling import plan_tiles

    if series == "lung1 stored sagittal":  # the same patient space, array axes permuted (x slowest)
        axial = load(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
        volume = Volume.from_sitk(sitk.PermuteAxes(axial.to_sitk(), (1, 2, 0)), axial.meta)
        assert volume.shape_zyx == (axial.shape_zyx[2], axial.shape_zyx[0], axial.shape_zyx[1])
    else:  # lung1: LPS, 5 mm slices; example_ct_sm: stored RAS
        volume = load(ct_dir / series)
    plan = _plan_variants()[configuration]
    planned = plan_tiles(volume, plan, 0.5)
    prep = preprocess(volume, plan)
    assert planned.network_shape == prep.data.shape[1:] and planned.network_spacing == pytest.approx(prep.spacing_network)
    run = []

    def runner(tiles):
        run.append(tiles.shape[0])
        return torch.zeros(tiles.shape[0], 2, *tiles.shape[2:])

    runner.device = torch.device("cpu")
    sliding_window_logits(runner, prep.data, plan, step_size=0.5)
    assert planned.tiles == sum(run)


def test_a_prepared_input_carries_its_preprocessing_fallback_into_the_run(package, abdomen, monkeypatch):
    """A batch prepares the next case ahead, on the run's device; running out of memory there
    falls back to the CPU, and the run that uses the prepared input lists it (it was lost)."""
    real = infer.preprocess_to

    def tight_device(volume, plan, device, cancel=None):
        if torch.device(device).type != "cpu":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB")
        return real(volume, plan, device, cancel)

    monkeypatch.setattr(infer, "preprocess_to", tight_device)
    prepared = infer.prepare(abdomen, package, device="cuda")
    assert prepared.fallbacks == ["out of memory preprocessing on cuda: preprocessing on the CPU"]
    result = segment(abdomen, package, device="cpu", prepared=prepared)
    assert result.fallbacks == prepared.fallbacks
    assert np.array_equal(result.label_map.array, segment(abdomen, package, device="cpu").label_map.array)
