"""Make tests/model/data/ts_crop_weights.npz: TotalSegmentator crop networks that mark compact, known regions.

Random crop weights mark their structures all over an image, so the crop box is the whole image and a
parity test passes without any crop. These networks (TotalSegmentator's layout, the small size of
ts_fixture.CROP_NETWORK) are fitted here for a few hundred steps to mark, on the real CTs the task tests
run on (ts_fixture.CROP_IMAGES), each crop structure inside a small cube only:

* on TotalSegmentator's example CT, its own label map (example_seg.nii.gz: liver, right lower lung lobe)
  inside a cube;
* elsewhere (a head CT, a chest CT, a pelvis) a label from Hounsfield units inside a cube (bone > 300 HU
  for skull, vertebra and femur; 15..50 HU for brain; 0..100 HU for heart; > -300 HU for the body trunk).

The networks are 298 (6 mm, the default crop model), 297 (3 mm, robust_crop), 300 (6 mm body model, for
body_trunc) and 115 (craniofacial_structures at 0.5 mm, the crop model of 'teeth'). The input of each is
prepared as TotalSegmentator and nnU-Net prepare it (closest canonical, TotalSegmentator's change_spacing,
nnU-Net's CT normalisation, the (z, y, x) order of its NIfTI reader, zero padding to the patch).

Run from the repository root: ``python tests/model/make_ts_crop_weights.py SHARED_DATA/ct [DATASET_ID...]``
(a few minutes on two cores; only the networks named are fitted again). The networks are deterministic for a seed, but the tests need only that they mark
compact regions; they do not depend on the exact values.

Tried and not kept (2026-12-08, 2 busy cores, about 20 min a run): a foreground weight of 4 or 12 with three
quarters of the patches cut as nnU-Net's sliding-window tiles gives a 6 mm network that marks nothing
(900-1200 steps); weight 30 with those tiles loses the liver, lung, heart, brain and skull. Smaller cubes
(brain 12 mm, heart 16 mm) need a different recipe, not only more steps.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np
import SimpleITK as sitk
import torch

sys.path.insert(0, str(Path(__file__).parent))
from nnunet_fixture import build_nnunet_network
from ts_fixture import (
    CROP_IMAGES,
    CROP_NETWORK,
    CROP_TARGETS,
    CROP_WEIGHTS,
    is_alias,
    network_plans,
    read_ct,
    task_networks,
)

# more structures on more images take longer to fit
STEPS = {298: 900, 297: 900, 300: 300, 115: 300}
# the structures are a few dozen voxels among thousands: their errors weigh this much more
FOREGROUND_WEIGHT = 30.0


def _prepared(image_path: Path, mask_path: Path, spacing_zyx, region_mm: float | None):
    """(network input, target) as (z, y, x) arrays at the network's spacing, as TotalSegmentator feeds it."""
    from totalsegmentator.resampling import change_spacing

    image, mask = nib.as_closest_canonical(nib.load(image_path)), nib.as_closest_canonical(nib.load(mask_path))
    if region_mm is not None:  # the craniofacial model sees only the skull's crop box; resample just that
        data = np.asanyarray(mask.dataobj)
        zooms = np.asarray(image.header.get_zooms()[:3])
        found = np.argwhere(data > 0)
        low = np.maximum(found.min(0) - (region_mm / zooms).astype(int), 0)
        high = np.minimum(found.max(0) + 1 + (region_mm / zooms).astype(int), data.shape)
        image, mask = (img.slicer[low[0]:high[0], low[1]:high[1], low[2]:high[2]] for img in (image, mask))
    spacing_xyz = list(spacing_zyx[::-1])
    image = change_spacing(nib.Nifti1Image(image.get_fdata(), image.affine), spacing_xyz, order=1, dtype=np.int32)
    mask = change_spacing(nib.Nifti1Image(mask.get_fdata(), mask.affine), spacing_xyz, order=0, dtype=np.uint8)
    return np.asarray(image.dataobj).T.astype(np.float32), np.asarray(mask.dataobj).T.astype(np.int64)


def _normalised(array: np.ndarray, plans: dict) -> np.ndarray:
    props = plans["foreground_intensity_properties_per_channel"]["0"]
    clipped = np.clip(array, props["percentile_00_5"], props["percentile_99_5"])
    return ((clipped - props["mean"]) / max(props["std"], 1e-8)).astype(np.float32)


def _padded(array: np.ndarray, patch, value) -> np.ndarray:
    pad = [max(p - s, 0) for p, s in zip(patch, array.shape)]
    return np.pad(array, [(p // 2, p - p // 2) for p in pad], constant_values=value)


def train(dataset_id: int, ct_dir: Path, work: Path, seed: int = 0) -> dict[str, np.ndarray]:
    network = next(n for n in _all_networks() if n.dataset_id == dataset_id)
    plans = network_plans(network, "current", **CROP_NETWORK)
    value_of = {name: value for value, name in network.labels.items()}
    samples = []
    for image_key, structures in CROP_TARGETS[dataset_id].items():
        image = read_ct(ct_dir, CROP_IMAGES[image_key])
        array = sitk.GetArrayFromImage(image)
        labels = np.zeros(array.shape, np.uint8)
        for name, make_mask in structures.items():
            labels[make_mask(ct_dir, array, image)] = value_of[name]
        assert labels.any(), (dataset_id, image_key)
        image_path, mask_path = work / f"{image_key}.nii.gz", work / f"{image_key}_{dataset_id}_mask.nii.gz"
        sitk.WriteImage(image, str(image_path))
        mask_image = sitk.GetImageFromArray(labels)
        mask_image.CopyInformation(image)
        sitk.WriteImage(mask_image, str(mask_path))
        x, y = _prepared(image_path, mask_path, network.spacing_zyx, 30.0 if dataset_id == 115 else None)
        patch = CROP_NETWORK["patch_size"]
        samples.append((_padded(_normalised(x, plans), patch, 0.0), _padded(y, patch, 0)))
        print(f"{dataset_id} {image_key}: {x.shape} at {network.spacing_zyx}, {int((y > 0).sum())} target voxels")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = build_nnunet_network(plans, network.configuration, len(network.labels) + 1, seed=seed,
                                 deep_supervision=False)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    class_weights = torch.ones(len(network.labels) + 1)
    class_weights[np.unique(np.concatenate([y.ravel() for _, y in samples]))[1:]] = FOREGROUND_WEIGHT
    patch = np.asarray(CROP_NETWORK["patch_size"])
    for step in range(STEPS[dataset_id]):
        xs, ys = [], []
        for _ in range(2):
            x, y = samples[rng.integers(len(samples))]
            if rng.random() < 0.7:  # most patches hold a target voxel
                centre = np.argwhere(y > 0)[rng.integers((y > 0).sum())]
                low = np.clip(centre - patch // 2 + rng.integers(-patch // 4, patch // 4 + 1), 0, np.subtract(y.shape, patch))
            else:
                low = np.asarray([rng.integers(s - p + 1) for s, p in zip(y.shape, patch)])
            box = tuple(slice(a, a + p) for a, p in zip(low, patch))
            xs.append(x[box])
            ys.append(y[box])
        logits = model(torch.from_numpy(np.stack(xs))[:, None])
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(np.stack(ys)), weight=class_weights)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 100 == 0 or step == STEPS[dataset_id] - 1:
            print(f"{dataset_id} step {step}: loss {loss.item():.4f}", flush=True)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _all_networks():
    return [n for task in ("total", "body", "craniofacial_structures") for n in task_networks(task)]


def _train_one(arguments) -> dict[str, np.ndarray]:
    dataset_id, ct_dir = arguments
    torch.set_num_threads(1)  # small convolutions: more threads only wait on each other
    with tempfile.TemporaryDirectory() as work:
        return train(dataset_id, Path(ct_dir), Path(work))


def main(ct_dir: str, ids: list[int]) -> None:
    """Fit the networks ``ids`` (all when empty); the others stay as stored."""
    import multiprocessing

    ids = ids or list(CROP_TARGETS)
    stored = {}
    with multiprocessing.get_context("spawn").Pool(len(ids)) as pool:  # one network per process
        for dataset_id, weights in zip(ids, pool.map(_train_one, [(i, ct_dir) for i in ids])):
            for key, value in weights.items():
                if not is_alias(key):  # nnU-Net's modules reach the same tensors twice; store them once
                    stored[f"{dataset_id}/{key}"] = value.astype(np.float16)
    if CROP_WEIGHTS.is_file():  # read now, not before fitting: another run may have fitted other networks
        with np.load(CROP_WEIGHTS, allow_pickle=False) as old:
            stored.update({k: old[k] for k in old.files if int(k.split("/")[0]) not in ids})
    CROP_WEIGHTS.parent.mkdir(exist_ok=True)
    np.savez_compressed(CROP_WEIGHTS, **stored)
    print(f"wrote {CROP_WEIGHTS} ({CROP_WEIGHTS.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(sys.argv[1], [int(i) for i in sys.argv[2:]])
