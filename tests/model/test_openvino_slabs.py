"""OpenVINO with the U-Net's full-resolution stage run slab by slab (medseg.model.openvino_slabs, issue #51).

Oracle: PyTorch's module forward on the same tiles of a real chest CT (the small nnU-Net network, its
isotropic plan: 3x3x3 kernels, so every slab reads a halo row on each side). Slabs of 4 rows make every
path run: zero rows past both ends of the tile, output slabs held back until no later slab reads the
rows they overwrite, the decoder's transposed convolution cut to each slab. The tolerance is the
whole-network OpenVINO test's (tests/model/test_cpu_runtime.py). The parts are kept in the cache
folder: a second runner reads them and computes the same logits.
"""

from __future__ import annotations

import pytest
import torch
from infer_fixtures import CHEST, crop_volume
from nnunet_fixture import make_nnunet_result_folder

from medseg.model import backends, cpu_runtime, openvino_slabs
from medseg.model.infer import prepare
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import build_networks
from medseg.model.sliding_window import middle_tile


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    folder = make_nnunet_result_folder(tmp_path_factory.mktemp("nnunet"), base_features=8, n_stages=4, seed=3,
                                       spacing_zyx=(1.5, 1.5, 1.5), network="PlainConvUNet")
    return import_nnunet(folder)


def test_the_slabbed_path_computes_pytorchs_logits_on_a_real_ct(package, ct_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(openvino_slabs, "SLAB_ROWS", 4)
    prepared = prepare(crop_volume(ct_dir, CHEST), package)
    configuration, plan = prepared.configuration, prepared.plan
    tile = middle_tile(prepared.image.data, plan.patch_size, 0.5)
    pair = torch.cat([tile, tile.flip(-1)])  # a batch of two: each tile its own pass
    shape = (1, plan.num_input_channels, *plan.patch_size)
    runner = openvino_slabs.openvino_runner(package, configuration, shape, threads=2)
    assert isinstance(runner, openvino_slabs.SlabbedOpenVinoRunner)
    assert runner.folds[0].rows == 4 < plan.patch_size[0]  # several slabs along the first axis
    with torch.inference_mode():
        reference = backends.TorchRunner(build_networks(package, configuration), "cpu")(pair)
    logits = runner(pair)
    assert logits.shape == reference.shape
    assert float((logits - reference).abs().max()) < 1e-3 * float(reference.abs().max())
    assert float((logits.argmax(1) == reference.argmax(1)).float().mean()) >= cpu_runtime.PARITY
    parts = sorted((tmp_path / "cache").rglob("*.xml"))
    assert parts  # kept: the next runner reads them instead of exporting the network again
    written = [part.stat().st_mtime_ns for part in parts]
    again = openvino_slabs.openvino_runner(package, configuration, shape, threads=2)
    assert torch.equal(again(pair), logits)
    assert [part.stat().st_mtime_ns for part in parts] == written


def test_networks_it_cannot_slab_run_compiled_whole(package):
    network = build_networks(package, "3d_fullres")[0]
    shape = (1, 1, *package.configurations["3d_fullres"].patch_size)
    assert openvino_slabs.supports(network, shape) == ""
    assert openvino_slabs.supports(network, (1, 1, 64, 64)) == "not a 3D network"
    assert "no slab size" in openvino_slabs.supports(network, (1, 1, 7, 64, 64))  # 7 rows: no even divisor
    network.decoder.deep_supervision = True
    assert "deep supervision" in openvino_slabs.supports(network, shape)
