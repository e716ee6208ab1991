"""The lean CPU forward (medseg.model.lean_forward) against the module forward, on real CT tiles.

Oracle: the U-Net's own module forward (with the same oneDNN convolutions the CPU
runner uses): the lean forward must give the same logits bit for bit, with slabs small
enough that every path runs (halos, zero padding at both ends, results held back before
they overwrite their input). Memory: the tensor bytes it allocates, counted by PyTorch's
profiler, stay under a bound computed from the plan's array sizes, a bound that the
module forward itself exceeds.
"""

from __future__ import annotations

import math

import pytest
import torch
from infer_fixtures import CHEST, ct_crop
from nnunet_fixture import make_nnunet_result_folder
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from medseg.core.volume import Volume
from medseg.model import backends, lean_forward
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import build_networks
from medseg.model.preprocess import preprocess
from medseg.model.sliding_window import pad_to_patch
from medseg.model.tiling import tile_slicers

torch.set_num_threads(2)

NETWORKS = {
    # the fixture's thick-slice plan: kernel 1x3x3 and no z-stride at the top stages
    "plain-thick": {"spacing_zyx": (3.0, 1.5, 1.5), "network": "PlainConvUNet"},
    # isotropic: 3x3x3 kernels everywhere, so every slab needs a halo along z
    "plain-iso": {"spacing_zyx": (1.5, 1.5, 1.5), "network": "PlainConvUNet"},
    "resenc-iso": {"spacing_zyx": (1.5, 1.5, 1.5), "network": "ResidualEncoderUNet"},
    # a 2D network: slabs run along y
    "plain-2d": {"spacing_zyx": (3.0, 1.5, 1.5), "network": "PlainConvUNet", "configuration": "2d",
                 "patch_size": (64, 64)},
}


@pytest.fixture(scope="module", params=list(NETWORKS))
def case(request, tmp_path_factory, ct_dir):
    spec = NETWORKS[request.param]
    folder = make_nnunet_result_folder(tmp_path_factory.mktemp(request.param), base_features=8, n_stages=4, seed=3,
                                       **spec)
    package = import_nnunet(folder)
    configuration = spec.get("configuration", "3d_fullres")
    plan = package.configurations[configuration]
    network = build_networks(package, configuration, "cpu")[0]
    backends.use_onednn_convolutions(network)  # as the CPU runner does
    image = torch.from_numpy(preprocess(Volume.from_sitk(ct_crop(ct_dir, CHEST)), plan).data)
    padded, _ = pad_to_patch(image, plan.patch_size)
    slicers = tile_slicers(padded.shape[1:], plan.patch_size, 0.5)
    tiles = torch.stack([padded[slicers[0]], padded[slicers[-1]]])  # two real tiles: a batch of 2
    return request.param, plan, network, tiles, package, configuration


@pytest.mark.parametrize("slab_bytes", [lean_forward.SLAB_BYTES, 64 * 1024], ids=["default-slabs", "tiny-slabs"])
def test_lean_forward_equals_module_forward_bit_for_bit(case, slab_bytes, monkeypatch):
    name, _, network, tiles, _, _ = case
    monkeypatch.setattr(lean_forward, "SLAB_BYTES", slab_bytes)
    with torch.inference_mode():
        expected = network(tiles)
        single = network(tiles[:1])
    assert torch.equal(lean_forward.lean_forward(network, tiles), expected), name
    assert torch.equal(lean_forward.lean_forward(network, tiles[:1]), single), name
    assert tiles.abs().sum() > 0 and expected.std() > 0  # real content, not an all-padding tile


def _peak_allocated_bytes(run) -> int:
    """Largest rise of live CPU tensor bytes (PyTorch's allocator) during run(), from the profiler's events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()

    def walk(nodes):
        for node in nodes:
            yield node
            yield from walk(node.children)

    events = sorted((e for e in walk(prof.profiler.kineto_results.experimental_event_tree())
                     if e.tag == _EventType.Allocation), key=lambda e: e.start_time_ns)
    live = peak = 0
    for event in events:
        live += event.extra_fields.alloc_size
        peak = max(peak, live)
    return peak


def test_lean_forward_memory_stays_under_the_bound_from_array_sizes(case, monkeypatch):
    name, plan, network, tiles, _, _ = case
    tile = tiles[:1]
    voxels = [math.prod(plan.patch_size)]
    for stride in plan.strides[1:]:
        voxels.append(voxels[-1] // math.prod(stride))
    top = plan.features_per_stage[0] * voxels[0] * 4  # one float32 activation at full resolution
    lower = sum(f * v * 4 for f, v in zip(plan.features_per_stage[1:], voxels[1:]))  # one per lower stage
    head = network.num_classes * voxels[0] * 4
    slab = top // 8
    monkeypatch.setattr(lean_forward, "SLAB_BYTES", slab)
    # the skip and one working activation at full resolution, the logits, two activations per
    # lower stage (a skip and a working one), and slab-sized scratch (input, output, halo copies)
    bound = 2 * top + head + 2 * lower + 6 * slab
    with torch.inference_mode():
        lean = _peak_allocated_bytes(lambda: lean_forward.lean_forward(network, tile))
        module = _peak_allocated_bytes(lambda: network(tile))
    assert lean <= bound, (name, lean, bound)
    # the module forward holds skip, upsampled and concatenation (4 activations) at once
    assert module > bound, (name, module, bound)


def test_inference_networks_share_the_package_weights_and_compute_the_same(case):
    name, _, network, tiles, package, configuration = case
    shared = build_networks(package, configuration, "cpu", share_weights=True)[0]
    backends.use_onednn_convolutions(shared)
    package_storage = {t.data_ptr() for t in package.weights[configuration][0].values()}
    assert all(p.data_ptr() in package_storage for p in shared.parameters()), name
    assert not any(p.data_ptr() in package_storage for p in network.parameters()), name  # the default copies
    with torch.inference_mode():
        assert torch.equal(shared(tiles), network(tiles)), name


def test_slab_budget_holds_inside_its_block_only(case):
    name, _, network, tiles, _, _ = case
    tile = tiles[:1]
    with torch.inference_mode():
        expected = network(tile)

    def run():
        with torch.inference_mode():
            return lean_forward.lean_forward(network, tile)

    with lean_forward.slab_budget(64 * 1024):
        assert torch.equal(run(), expected), name
        small = _peak_allocated_bytes(run)
    with lean_forward.slab_budget(1 << 30):
        assert torch.equal(run(), expected), name
        large = _peak_allocated_bytes(run)
    assert small < large, (name, small, large)  # whole-tensor slabs hold more scratch at once
    assert _peak_allocated_bytes(run) > small  # the tiny slabs end with their block
