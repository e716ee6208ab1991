"""On-the-fly training augmentation in torch: patch extraction with rotation/scaling,
mirroring, intensity noise, brightness, contrast and gamma (and, when asked for, a soft-tissue
HU shift that mimics contrast enhancement).

The probabilities and ranges are nnU-Net v2's defaults (``nnUNetTrainer.get_training_transforms``):
rotation ±30° per axis and scaling 0.7–1.4 each with p 0.2, Gaussian noise (variance
0..0.1) p 0.1, brightness ×0.75–1.25 p 0.15, contrast ×0.75–1.25 p 0.15, gamma 0.7–1.5
p 0.3 (and on the inverted image p 0.1), mirroring each axis p 0.5.

Every random decision comes from a ``numpy.random.Generator`` handed in by the caller.
The trainer seeds one per sample from (seed, epoch, iteration, sample index), so a
sample is the same whichever process of a distributed run draws it.

Rotation and scaling are applied while the patch is extracted (one interpolation, read
straight from the whole preprocessed volume, so there are no padded borders inside the
patch). Rotations are in millimetres, not voxels, so an anisotropic grid is not sheared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class AugmentConfig:
    enabled: bool = True
    p_rotation: float = 0.2
    max_rotation_deg: float = 30.0
    p_scale: float = 0.2
    scale_range: tuple[float, float] = (0.7, 1.4)
    p_noise: float = 0.1
    noise_variance: tuple[float, float] = (0.0, 0.1)
    p_brightness: float = 0.15
    brightness_range: tuple[float, float] = (0.75, 1.25)
    p_contrast: float = 0.15
    contrast_range: tuple[float, float] = (0.75, 1.25)
    p_gamma: float = 0.3
    p_gamma_inverted: float = 0.1
    gamma_range: tuple[float, float] = (0.7, 1.5)
    p_mirror: float = 0.5
    mirror_axes: tuple[int, ...] | None = None  # spatial axes; None = all
    # Soft-tissue shift (not in nnU-Net, off by default): voxels between 0 and 300 HU (ramping
    # to nothing at -100 and 400) move by one random amount in this range, as organs do
    # between non-contrast and contrast-enhanced scans (liver 46 HU in example_ct_sm, 93 in
    # example_ct_dicom), while air, fat and dense bone stay put. It needs the CT
    # normalisation (mean, std), which the trainer fills in from the plan.
    p_tissue_shift: float = 0.0
    tissue_shift_hu: tuple[float, float] = (0.0, 0.0)
    ct_mean_std: tuple[float, float] | None = None


NO_AUGMENTATION = AugmentConfig(enabled=False)


def _rotation_matrix(angles_rad: Sequence[float], ndim: int) -> np.ndarray:
    if ndim == 2:
        (a,) = angles_rad[:1]
        return np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    matrix = np.eye(3)
    for axis, angle in enumerate(angles_rad):
        c, s = math.cos(angle), math.sin(angle)
        i, j = [k for k in range(3) if k != axis]
        rotation = np.eye(3)
        rotation[i, i], rotation[i, j], rotation[j, i], rotation[j, j] = c, -s, s, c
        matrix = rotation @ matrix
    return matrix


def random_spatial_transform(
    rng: np.random.Generator, config: AugmentConfig, spacing: Sequence[float]
) -> np.ndarray | None:
    """A matrix mapping patch voxel offsets to volume voxel offsets, or None for identity.

    ``spacing`` is the grid spacing in the array's axis order (z, y, x or y, x).
    """
    if not config.enabled:
        return None
    ndim = len(spacing)
    rotate = rng.random() < config.p_rotation
    scale = rng.random() < config.p_scale
    if not (rotate or scale):
        return None
    matrix = np.eye(ndim)
    if rotate:
        limit = math.radians(config.max_rotation_deg)
        angles = rng.uniform(-limit, limit, size=3 if ndim == 3 else 1)
        physical = np.diag(spacing)
        matrix = np.linalg.inv(physical) @ _rotation_matrix(angles, ndim) @ physical
    if scale:
        matrix = matrix * rng.uniform(*config.scale_range)
    return matrix


def extract_patch(
    image: torch.Tensor,
    label: torch.Tensor,
    center: Sequence[float],
    patch_size: Sequence[int],
    transform: np.ndarray | None,
    pad_value: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut a patch centred at ``center`` (voxel index) from (C, *spatial) image and (1, *spatial) label.

    Outside the volume the image reads ``pad_value`` (air) and the label background.
    """
    if transform is None:
        return _slice_patch(image, label, [int(round(c)) for c in center], patch_size, pad_value)
    ndim = len(patch_size)
    shape = image.shape[1:]
    # Offsets -n//2 .. n - n//2 - 1: the same voxels as the plain slicing path when untransformed.
    offsets = torch.meshgrid(*[torch.arange(n, dtype=torch.float64) - n // 2 for n in patch_size], indexing="ij")
    offsets = torch.stack(offsets, dim=-1).reshape(-1, ndim)
    coords = offsets @ torch.as_tensor(transform, dtype=torch.float64).T + torch.as_tensor(center, dtype=torch.float64)
    # grid_sample wants (x, y[, z]) normalised to [-1, 1] with align_corners=True.
    sizes = torch.as_tensor(shape, dtype=torch.float64)
    normalised = 2.0 * coords / (sizes - 1).clamp_min(1) - 1.0
    grid = normalised.flip(-1).reshape(1, *patch_size, ndim).to(torch.float32)
    shifted = (image - pad_value).unsqueeze(0)
    image_patch = F.grid_sample(shifted, grid, mode="bilinear", padding_mode="zeros", align_corners=True)[0] + pad_value
    label_patch = F.grid_sample(
        label.unsqueeze(0).float(), grid, mode="nearest", padding_mode="zeros", align_corners=True
    )[0]
    return image_patch, label_patch.to(label.dtype)


def _slice_patch(
    image: torch.Tensor, label: torch.Tensor, center: Sequence[int], patch_size: Sequence[int], pad_value: float
) -> tuple[torch.Tensor, torch.Tensor]:
    shape = image.shape[1:]
    image_patch = image.new_full((image.shape[0], *patch_size), pad_value)
    label_patch = label.new_zeros((label.shape[0], *patch_size))
    source, target = [], []
    for c, n, size in zip(center, patch_size, shape):
        start = c - n // 2
        lo, hi = max(start, 0), min(start + n, size)
        if hi <= lo:  # patch entirely outside along this axis: all padding
            return image_patch, label_patch
        source.append(slice(lo, hi))
        target.append(slice(lo - start, hi - start))
    image_patch[(slice(None), *target)] = image[(slice(None), *source)]
    label_patch[(slice(None), *target)] = label[(slice(None), *source)]
    return image_patch, label_patch


def augment_intensity(patch: torch.Tensor, rng: np.random.Generator, config: AugmentConfig) -> torch.Tensor:
    """Noise, brightness, contrast and gamma on one (C, *spatial) patch."""
    if not config.enabled:
        return patch
    if config.p_tissue_shift > 0 and config.ct_mean_std is not None and rng.random() < config.p_tissue_shift:
        mean, std = config.ct_mean_std
        hu = patch * std + mean
        weight = ((hu + 100.0) / 100.0).clamp(0, 1) * ((400.0 - hu) / 100.0).clamp(0, 1)
        patch = patch + weight * (float(rng.uniform(*config.tissue_shift_hu)) / std)
    if rng.random() < config.p_noise:
        variance = rng.uniform(*config.noise_variance)
        generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
        noise = torch.randn(patch.shape, generator=generator, dtype=patch.dtype)
        patch = patch + noise * math.sqrt(variance)
    if rng.random() < config.p_brightness:
        patch = patch * rng.uniform(*config.brightness_range)
    if rng.random() < config.p_contrast:
        factor = rng.uniform(*config.contrast_range)
        mean = patch.mean()
        lo, hi = patch.min(), patch.max()
        patch = ((patch - mean) * factor + mean).clamp(lo, hi)  # nnU-Net preserves the range
    if rng.random() < config.p_gamma_inverted:
        patch = -_gamma(-patch, rng.uniform(*config.gamma_range))
    if rng.random() < config.p_gamma:
        patch = _gamma(patch, rng.uniform(*config.gamma_range))
    return patch


def _gamma(patch: torch.Tensor, gamma: float) -> torch.Tensor:
    # Gamma on the patch rescaled to [0, 1], then back, keeping mean and std (nnU-Net's retain_stats).
    mean, std = patch.mean(), patch.std()
    lo, hi = patch.min(), patch.max()
    span = (hi - lo).clamp_min(1e-7)
    out = ((patch - lo) / span).pow(gamma) * span + lo
    out_std = out.std().clamp_min(1e-7)
    return (out - out.mean()) / out_std * std + mean


def mirror(
    patch: torch.Tensor, label: torch.Tensor, rng: np.random.Generator, config: AugmentConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip each allowed spatial axis with probability ``p_mirror``."""
    if not config.enabled:
        return patch, label
    ndim = patch.ndim - 1
    axes = config.mirror_axes if config.mirror_axes is not None else tuple(range(ndim))
    flips = [axis + 1 for axis in axes if axis < ndim and rng.random() < config.p_mirror]
    if flips:
        patch, label = patch.flip(flips), label.flip(flips)
    return patch, label


def augmented_patch(
    image: torch.Tensor,
    label: torch.Tensor,
    center: Sequence[float],
    patch_size: Sequence[int],
    spacing: Sequence[float],
    pad_value: float,
    rng: np.random.Generator,
    config: AugmentConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One training sample: spatial transform while cutting, then intensity, then mirroring."""
    transform = random_spatial_transform(rng, config, spacing)
    patch, label_patch = extract_patch(image, label, center, patch_size, transform, pad_value)
    patch = augment_intensity(patch, rng, config)
    return mirror(patch, label_patch, rng, config)
