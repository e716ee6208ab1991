"""A TotalSegmentator-sized label set (117 labels): the export's memory stays bounded.

A random-weight 117-label network (nnU-Net's own code) on a real chest crop (16 slices of
512 x 512 pixels of lung1); the logits go back to the CT's grid with the argmax carried
class chunk by class chunk. Peak resident memory during that export, measured exactly
with the kernel's high-water mark (/proc/self/clear_refs, Linux), must stay within issue
#27's budget: twice the label map plus one class's float32 logits on the image grid. The
same export with every class at once (the memory the chunking saves) is measured too and
must not fit, or the test would not show anything.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest
import torch
from infer_fixtures import CHEST, crop_volume, ct_crop, nnunet_preprocessed
from nnunet_fixture import make_nnunet_result_folder
from nnunetv2.inference.export_prediction import convert_predicted_logits_to_segmentation_with_correct_shape

from medseg.core.volume import Volume
from medseg.model import logits_grid as lg
from medseg.model import preprocess as pp
from medseg.model.backends import TorchRunner
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import build_networks
from medseg.model.sliding_window import sliding_window_logits

torch.set_num_threads(2)
LABELS = ["background"] + [f"structure_{i}" for i in range(1, 117)]
CROP = (slice(16, 32), slice(None), slice(None))  # lung1: 16 slices of 512 x 512 (0.57 mm pixels, 5 mm slices)


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _exact_malloc() -> None:
    """Make the resident memory follow the live allocations: glibc's malloc raises its mmap threshold
    after a large block is freed (up to 32 MiB), and blocks under it stay in the heap when freed, so
    one run's freed slabs would hide the next run's, or fragment the heap and add to it (measured:
    -0.1 MiB one run, +35 MiB the next). A fixed threshold maps every block over 64 KiB on its own
    and unmaps it when freed; the trim hands the heap's free memory back before measuring."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD (malloc.h); also turns the dynamic threshold off
    libc.malloc_trim(0)


def peak_rss_increase(function) -> tuple[object, int]:
    """(result, bytes): the process's peak resident memory during the call above its memory before it."""
    _exact_malloc()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current RSS (proc(5), Linux >= 4.0)
    before = _status_kb("VmRSS")
    result = function()
    return result, (_status_kb("VmHWM") - before) * 1024


@pytest.fixture(scope="module")
def logits_and_prep(tmp_path_factory, ct_dir):
    folder = make_nnunet_result_folder(tmp_path_factory.mktemp("labels117"), labels=LABELS, base_features=4,
                                       n_stages=3, seed=3)
    package = import_nnunet(folder)
    plan = package.configurations["3d_fullres"]
    volume = crop_volume(ct_dir, (CHEST[0], CROP))
    prep = pp.preprocess_to(volume, plan, "cpu")
    runner = TorchRunner(build_networks(package, "3d_fullres", "cpu"), "cpu")
    logits = sliding_window_logits(runner, prep.data, plan)
    assert logits.shape[0] == 117
    return logits, prep, volume


def test_117_label_export_memory_is_bounded(logits_and_prep, monkeypatch):
    logits, prep, volume = logits_and_prep
    label_bytes = int(np.prod(volume.shape_zyx))  # uint8
    one_class = int(np.prod(volume.shape_zyx)) * 4  # float32 on the image grid
    budget = 2 * label_bytes + one_class
    # The slab budget is a constant (4 M voxels: 16 classes of a 512 x 512 slice), about 4 % of the
    # budget above for a 512 x 512 x 300 CT; scaled to this crop: one class of a slice per pass.
    plane = volume.shape_zyx[1] * volume.shape_zyx[2]
    monkeypatch.setattr(lg, "SLAB_VOXELS", plane)
    lg.logits_to_label_map(logits, prep)  # warm: thread pools, the allocator's arenas
    labels, chunked = peak_rss_increase(lambda: lg.logits_to_label_map(logits, prep))
    print(f"117 labels, {volume.shape_zyx}: export peak +{chunked / 2**20:.1f} MiB; budget {budget / 2**20:.1f} MiB "
          f"(2 x label map {label_bytes / 2**20:.1f} + one class {one_class / 2**20:.1f})")
    assert chunked <= budget, f"export peak {chunked / 2**20:.1f} MiB over the budget {budget / 2**20:.1f} MiB"

    # the same export without class chunks (every class of a slice at once): over the budget
    monkeypatch.setattr(lg, "_class_chunks", lambda n, plane, budget: [slice(0, n)])
    unchunked_labels, unchunked = peak_rss_increase(lambda: lg.logits_to_label_map(logits, prep))
    print(f"  every class at once: +{unchunked / 2**20:.1f} MiB")
    assert unchunked > budget
    # chunking changes the memory, not the labels: torch's bilinear interpolation vectorises across the
    # channels, so one class at a time rounds a float32 differently from 117 at once now and then, and a
    # near tie after the float16 rounding can flip (measured: 1 voxel of 4.2 M)
    assert (labels != unchunked_labels).mean() <= 1e-5
    assert len(np.unique(labels)) > 20  # a random 117-label network: many labels to get right


def test_chunked_export_equals_nnunets_export(tmp_path, ct_dir, monkeypatch):
    """117 classes chunk by chunk give nnU-Net's labels (its export: float64 resampling of all classes, argmax)."""
    folder = make_nnunet_result_folder(tmp_path, labels=LABELS, base_features=4, n_stages=3, seed=3)
    image = ct_crop(ct_dir, CHEST)
    _, properties, plans, dataset_json = nnunet_preprocessed(folder, image)
    prep = pp.preprocess(Volume.from_sitk(image), import_nnunet(folder).configurations["3d_fullres"])
    logits = torch.randn((117, *prep.data.shape[1:]), generator=torch.Generator().manual_seed(5)).half()
    expected = convert_predicted_logits_to_segmentation_with_correct_shape(
        logits.clone(), plans, plans.get_configuration("3d_fullres"), plans.get_label_manager(dataset_json), properties)
    plane = int(np.prod(prep.shape_after_crop[1:]))
    monkeypatch.setattr(lg, "SLAB_VOXELS", plane * 10)  # a budget of 10 classes' output slices: 12 chunks
    labels = lg.logits_to_label_map(logits, prep)
    assert len(np.unique(expected)) > 100
    # nnU-Net resamples in float64, medseg in float32, both round to float16: ties of 117 random
    # logits can fall either way, as with 3 (tests/model/test_preprocess.py)
    assert (labels == expected).mean() >= 0.9999
    monkeypatch.setattr(lg, "SLAB_VOXELS", plane * 117)  # every class in one pass
    assert np.array_equal(lg.logits_to_label_map(logits, prep), labels)  # the chunks change nothing
