"""Cases at the plan's spacing, and the reproducible patch sampling that feeds the loop.

Every sample is drawn from a generator seeded with (seed, epoch, iteration, index in the
global batch), so under ``torchrun`` each process takes a contiguous share of the global
batch and together they draw exactly the patches one process would.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from medseg.model.augment import AugmentConfig, augmented_patch
from medseg.model.datasets import Case
from medseg.model.plan import Plan
from medseg.model.training.config import TrainConfig
from medseg.model.training.distributed import DistributedContext

CLASS_LOCATIONS_PER_LABEL = 10_000  # nnU-Net samples at most this many voxels per class and case


@dataclass
class PreparedCase:
    """A case at the plan's spacing: normalised image (1, z, y, x), label map (1, z, y, x)."""

    name: str
    image: torch.Tensor
    label: torch.Tensor
    class_locations: dict[int, np.ndarray]  # label index -> (N, 3) voxel indices (z, y, x)
    spacing_zyx: tuple[float, float, float]
    pad_value: float  # what patches read outside the image (0, the inference padding)
    weight: float = 1.0  # relative sampling frequency (the manifest's "weight")


def prepare_case(case: Case, plan: Plan, seed: int = 0, weight: float = 1.0) -> PreparedCase:
    """Preprocess exactly as inference does (medseg.model.preprocess); label map by nearest neighbour."""
    from medseg.model import preprocess

    prep = preprocess.preprocess(case.image, plan)
    labels = np.asarray(case.label_map.array)
    if prep.reorientation is not None:
        labels = prep.reorientation.apply(labels)
    labels = np.transpose(labels, prep.transpose_forward)[prep.bbox]
    new_shape = prep.data.shape[1:]
    # Nearest neighbour on the same (align_corners=False) coordinates as the image resampling.
    indices = [preprocess.nearest_source_indices(n_in, n_out) for n_in, n_out in zip(labels.shape, new_shape)]
    labels = np.ascontiguousarray(labels[np.ix_(*indices)], dtype=np.uint8)
    rng = np.random.default_rng(seed)
    locations = {}
    for value in np.unique(labels):
        if value == 0:
            continue
        where = np.argwhere(labels == value)
        if len(where) > CLASS_LOCATIONS_PER_LABEL:
            where = where[rng.choice(len(where), CLASS_LOCATIONS_PER_LABEL, replace=False)]
        locations[int(value)] = where
    return PreparedCase(
        case.name,
        torch.from_numpy(np.ascontiguousarray(prep.data, dtype=np.float32)),
        torch.from_numpy(labels)[None],
        locations,
        tuple(float(s) for s in prep.spacing_network),
        # Outside the image reads 0, as in nnU-Net and as the sliding window pads at inference
        # (a model trained on air padding mistakes a zero-padded frame for tissue).
        0.0,
        float(weight),
    )


# --------------------------------------------------------------------------------------------
# Sampling


def sample_rng(seed: int, epoch: int, iteration: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, iteration, index])


def pick_case(cases: Sequence[PreparedCase], rng: np.random.Generator) -> PreparedCase:
    """A case drawn in proportion to its weight (uniformly, as nnU-Net does, when all are equal)."""
    weights = [c.weight for c in cases]
    if len(set(weights)) <= 1:
        return cases[int(rng.integers(len(cases)))]
    cumulative = np.cumsum(weights)
    return cases[min(int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")), len(cases) - 1)]


def draw_sample(
    cases: Sequence[PreparedCase], plan: Plan, config: TrainConfig, global_batch: int,
    epoch: int, iteration: int, index: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``index`` of the global batch: the same patch whichever process draws it."""
    rng = sample_rng(config.seed, epoch, iteration, index)
    case = pick_case(cases, rng)
    shape = case.image.shape[1:]
    # nnU-Net: the last `oversample_foreground` of the batch is forced onto a labelled voxel.
    force_foreground = index >= round(global_batch * (1.0 - config.oversample_foreground))
    if force_foreground and case.class_locations:
        labels = sorted(case.class_locations)
        locations = case.class_locations[labels[int(rng.integers(len(labels)))]]
        center = [float(c) for c in locations[int(rng.integers(len(locations)))]]
    else:
        center = [float(rng.uniform(0, n - 1)) if n > 1 else 0.0 for n in shape]
    # Along an axis shorter than the patch, place the image in the patch exactly as the sliding
    # window does at inference (centred, zero-padded): the model must see that frame in training.
    spatial = shape[1:] if plan.dim == 2 else shape
    offset = 1 if plan.dim == 2 else 0
    for axis, (n, p) in enumerate(zip(spatial, plan.patch_size)):
        if n < p:
            center[axis + offset] = float(p // 2 - (p - n) // 2)
    if plan.dim == 2:
        z = int(round(center[0]))
        image, label = case.image[:, z], case.label[:, z]
        return augmented_patch(image, label, center[1:], plan.patch_size, case.spacing_zyx[1:],
                               case.pad_value, rng, _augment_for(plan, config))
    return augmented_patch(case.image, case.label, center, plan.patch_size, case.spacing_zyx,
                           case.pad_value, rng, _augment_for(plan, config))


def _augment_for(plan: Plan, config: TrainConfig) -> AugmentConfig:
    augmentation = config.augmentation
    if augmentation.mirror_axes is None and plan.mirror_axes is not None:
        augmentation = dataclasses.replace(augmentation, mirror_axes=tuple(plan.mirror_axes))
    norm = plan.normalization or {}
    if augmentation.p_tissue_shift > 0 and augmentation.ct_mean_std is None and norm.get("scheme") == "CTNormalization":
        augmentation = dataclasses.replace(augmentation, ct_mean_std=(float(norm["mean"]), float(norm["std"])))
    return augmentation


def host_batch(
    cases: Sequence[PreparedCase], plan: Plan, config: TrainConfig, global_batch: int,
    epoch: int, iteration: int, ctx: DistributedContext,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's contiguous share of the global batch, in host memory.

    Drawn with one intra-op thread wherever it runs (the training loop, a prefetch thread, on any
    machine): a parallel reduction's rounding depends on the thread count, so the batches are the
    same bit for bit everywhere, and prefetch threads (medseg.model.training.prefetch) add one
    computing thread each beside the training step, as medseg's thread budget counts them.
    """
    share = global_batch // ctx.world_size
    indices = range(ctx.rank * share, (ctx.rank + 1) * share)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        samples = [draw_sample(cases, plan, config, global_batch, epoch, iteration, i) for i in indices]
        return torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])
    finally:
        torch.set_num_threads(before)


def local_batch(
    cases: Sequence[PreparedCase], plan: Plan, config: TrainConfig, global_batch: int,
    epoch: int, iteration: int, ctx: DistributedContext,
) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's contiguous share of the global batch, on its device (drawn now: the in-loop sampler)."""
    images, labels = host_batch(cases, plan, config, global_batch, epoch, iteration, ctx)
    return images.to(ctx.device, non_blocking=True), labels.to(ctx.device, non_blocking=True)
