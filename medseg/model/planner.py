"""Plan a U-Net from voxel spacing and image shape, with nnU-Net v2's rules.

The rules and constants are those of nnU-Net v2 (``ExperimentPlanner``, default
PlainConvUNet planner, version 2.8.1, and ``network_topology.get_pool_and_conv_props``);
they are written down below so that a plan made here equals the one nnU-Net makes, which
the tests check against nnU-Net itself. The result is a :class:`~medseg.model.plan.Plan`;
axis conventions are described there.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from medseg.errors import ModelError
from medseg.model.plan import ANISOTROPY_THRESHOLD, MIN_BATCH_SIZE, PLAN_BOUNDS, Plan, finite_number

# --- nnU-Net v2 constants (nnunetv2/experiment_planning/experiment_planners) ------------
FEATUREMAP_MIN_EDGE_LENGTH = 4  # UNet_featuremap_min_edge_length: bottleneck edge >= 4
MAX_NUMPOOL = 999999  # v2 has no pooling cap: depth is limited by the patch size only
BASE_NUM_FEATURES = 32  # UNet_base_num_features
MAX_FEATURES_3D = 320  # UNet_max_features_3d
MAX_FEATURES_2D = 512  # UNet_max_features_2d
REFERENCE_VAL_3D = 560_000_000  # UNet_reference_val_3d: activation count that fits 8 GB
REFERENCE_VAL_2D = 85_000_000  # UNet_reference_val_2d
REFERENCE_BATCH_SIZE_3D = 2  # UNet_reference_val_corresp_bs_3d
REFERENCE_BATCH_SIZE_2D = 12  # UNet_reference_val_corresp_bs_2d
MAX_DATASET_COVERED = 0.05  # a batch never covers more than 5 % of the training voxels
INITIAL_PATCH_EDGE_3D = 256  # initial 3D patch has the volume of 256^3
INITIAL_PATCH_EDGE_2D = 2048  # initial 2D patch has the area of 2048^2
CONVS_PER_STAGE_ENCODER = 2
CONVS_PER_STAGE_DECODER = 2


# --- topology: nnU-Net's get_pool_and_conv_props -----------------------------------
def get_pool_and_conv_props(
    spacing: Sequence[float],
    patch_size: Sequence[int],
    min_feature_map_size: int = FEATUREMAP_MIN_EDGE_LENGTH,
    max_numpool: int = MAX_NUMPOOL,
) -> tuple[list[int], list[list[int]], list[list[int]], tuple[int, ...], list[int]]:
    """Per-stage strides and kernels for a patch, following nnU-Net v2's rules.

    Returns ``(num_pool_per_axis, strides, kernel_sizes, padded_patch_size, shape_divisor)``.
    """
    dim = len(spacing)
    current_spacing = [float(s) for s in spacing]
    # Sizes stay as given (nnU-Net passes float median shapes such as 233.5 here).
    current_size = [float(s) for s in patch_size]
    strides: list[list[int]] = [[1] * dim]  # stage 0 never downsamples
    kernels: list[list[int]] = []
    num_pool = [0] * dim
    kernel = [1] * dim  # flips to 3 per axis once that axis is within 2x of the finest, stays 3
    while True:
        # An axis can be pooled only if the feature map stays >= min edge afterwards.
        valid = [a for a in range(dim) if current_size[a] >= 2 * min_feature_map_size]
        if not valid:
            break
        finest = min(current_spacing[a] for a in valid)
        # Anisotropy rule: pool only axes within 2x of the finest still-poolable axis.
        valid = [a for a in valid if current_spacing[a] / finest < 2]
        valid = [a for a in valid if num_pool[a] < max_numpool]
        # An axis pooled on its own must be larger (>= 3x min edge) to be worth a stage.
        if len(valid) == 1 and current_size[valid[0]] < 3 * min_feature_map_size:
            break
        if not valid:
            break
        finest_all = min(current_spacing)
        for axis in range(dim):
            if kernel[axis] != 3 and current_spacing[axis] / finest_all < 2:
                kernel[axis] = 3
        stride = [2 if a in valid else 1 for a in range(dim)]
        for axis in valid:
            num_pool[axis] += 1
            current_spacing[axis] *= 2
            current_size[axis] = math.ceil(current_size[axis] / 2)
        strides.append(stride)
        kernels.append(list(kernel))
    kernels.append([3] * dim)  # the bottleneck always uses 3x3(x3)
    divisor = [2**n for n in num_pool]
    return num_pool, strides, kernels, _pad_to_multiple(patch_size, divisor), divisor


def _pad_to_multiple(shape: Sequence[float], divisor: Sequence[int]) -> tuple[int, ...]:
    """Round each edge UP to a multiple of its divisor (unchanged if already a multiple).

    Written as nnU-Net's pad_shape so that a fractional edge (e.g. a median of 224.5)
    rounds the same way.
    """
    padded = []
    for s, d in zip(shape, divisor):
        remainder = s % d
        padded.append(int(s if remainder == 0 else s + d - remainder))
    return tuple(padded)


def features_per_stage(num_stages: int, dim: int) -> list[int]:
    cap = MAX_FEATURES_3D if dim == 3 else MAX_FEATURES_2D
    return [min(BASE_NUM_FEATURES * 2**i, cap) for i in range(num_stages)]


def estimate_feature_map_size(
    patch_size: Sequence[int],
    strides: Sequence[Sequence[int]],
    features: Sequence[int],
    n_conv_encoder: Sequence[int],
    n_conv_decoder: Sequence[int],
    num_classes: int,
    deep_supervision: bool = False,
) -> int:
    """Activation count of one forward pass at batch size 1: nnU-Net's memory proxy.

    Same arithmetic as dynamic_network_architectures' ``compute_conv_feature_map_size``
    for PlainConvUNet: every conv, transposed conv and output head contributes
    channels x voxels of its output.
    """
    total = 0
    size = [int(s) for s in patch_size]
    stage_sizes = []
    for s, stride in enumerate(strides):
        size = [a // b for a, b in zip(size, stride)]
        stage_sizes.append(size)
        total += n_conv_encoder[s] * features[s] * math.prod(size)
    n = len(strides)
    for d in range(n - 1):  # d = 0 is the deepest decoder stage
        skip = n - 2 - d
        voxels = math.prod(stage_sizes[skip])
        total += n_conv_decoder[d] * features[skip] * voxels  # conv blocks
        total += features[skip] * voxels  # transposed conv output
        if deep_supervision or d == n - 2:
            total += num_classes * voxels
    return total


# --- planning one configuration -------------------------------------------------------
def plan_from_spacing(
    spacing_zyx: Sequence[float],
    shape_zyx: Sequence[int],
    memory_reference: float = REFERENCE_VAL_3D,
    dim: int = 3,
    *,
    num_classes: int = 2,
    num_training_cases: int | None = None,
    name: str | None = None,
    normalization: dict[str, Any] | None = None,
    target_spacing_transposed: Sequence[float] | None = None,
) -> Plan:
    """Plan one configuration for images of this (target) spacing and median shape.

    ``spacing_zyx``/``shape_zyx`` are 3 values (z, y, x); a 2D plan uses the last two.
    ``memory_reference`` is the 3D activation budget (560e6 = nnU-Net's 8 GB reference);
    a 2D plan scales nnU-Net's 2D reference (85e6) by the same factor.
    ``num_training_cases`` caps the batch size at 5 % of the training voxels, as nnU-Net
    does; leave it None when planning for a single series.
    """
    if dim not in (2, 3):
        raise ModelError(f"dim must be 2 or 3, not {dim}")
    if len(spacing_zyx) != 3 or len(shape_zyx) != 3:
        raise ModelError("spacing and shape need 3 values each (z, y, x)")
    if any(not float(s) > 0 for s in spacing_zyx) or any(int(n) < 1 for n in shape_zyx):
        raise ModelError(f"spacing {tuple(spacing_zyx)} and shape {tuple(shape_zyx)} must be positive")
    spacing = np.asarray(spacing_zyx, dtype=float)[3 - dim :]
    median_shape = np.asarray(shape_zyx, dtype=float)[3 - dim :]

    # Initial patch: same volume as 256^3 (area 2048^2 in 2D), aspect ratio = 1/spacing,
    # clipped to the median image (nnU-Net v2, unlike v1).
    inverse = 1.0 / spacing
    edge = INITIAL_PATCH_EDGE_3D if dim == 3 else INITIAL_PATCH_EDGE_2D
    initial = [round(v) for v in inverse * (edge**dim / np.prod(inverse)) ** (1 / dim)]
    initial = [min(int(i), m) for i, m in zip(initial, median_shape)]

    scale = memory_reference / REFERENCE_VAL_3D
    reference = (REFERENCE_VAL_3D if dim == 3 else REFERENCE_VAL_2D) * scale
    reference_batch = REFERENCE_BATCH_SIZE_3D if dim == 3 else REFERENCE_BATCH_SIZE_2D

    def topology(patch: Sequence[int]):
        _, strides, kernels, padded, divisor = get_pool_and_conv_props(spacing, patch)
        n = len(strides)
        features = features_per_stage(n, dim)
        enc = [CONVS_PER_STAGE_ENCODER] * n
        dec = [CONVS_PER_STAGE_DECODER] * (n - 1)
        estimate = estimate_feature_map_size(padded, strides, features, enc, dec, num_classes)
        return strides, kernels, list(padded), divisor, features, enc, dec, estimate

    strides, kernels, patch, divisor, features, enc, dec, estimate = topology(initial)
    # nnU-Net's default planner (since Feb 2024) compares per-sample memory at batch 2.
    while estimate / reference_batch * 2 > reference:
        # Shrink the axis that is largest relative to the median image.
        axis = int(np.argsort([p / m for p, m in zip(patch, median_shape)])[-1])
        trial = list(patch)
        trial[axis] -= divisor[axis]
        # Recompute the divisor for the smaller patch first so that valid sizes such as
        # 224 (not a multiple of 64) are not skipped.
        _, _, _, _, trial_divisor = get_pool_and_conv_props(spacing, trial)
        patch[axis] -= trial_divisor[axis]
        strides, kernels, patch, divisor, features, enc, dec, estimate = topology(patch)

    batch_size = round(reference / estimate * reference_batch)
    if num_training_cases is not None:
        # nnU-Net counts the 3D median image here for 2D plans too.
        dataset_voxels = float(np.prod(np.asarray(shape_zyx, dtype=np.float64))) * num_training_cases
        batch_cap = round(dataset_voxels * MAX_DATASET_COVERED / np.prod(patch, dtype=np.float64))
        batch_size = min(batch_size, batch_cap)
    batch_size = max(batch_size, MIN_BATCH_SIZE)

    full_target = target_spacing_transposed if target_spacing_transposed is not None else spacing_zyx
    return Plan(
        name=name or ("3d_fullres" if dim == 3 else "2d"),
        dim=dim,
        target_spacing_transposed=tuple(float(s) for s in full_target),
        patch_size=tuple(patch),
        strides=strides,
        kernel_sizes=kernels,
        features_per_stage=features,
        n_conv_per_stage_encoder=enc,
        n_conv_per_stage_decoder=dec,
        batch_size=batch_size,
        normalization=dict(normalization) if normalization else {"scheme": "ZScoreNormalization"},
        median_shape=tuple(int(round(m)) for m in median_shape),
    )


# --- planning from a training-set fingerprint ------------------------------------------
def fullres_target_spacing(spacings: Sequence[Sequence[float]], shapes: Sequence[Sequence[int]]) -> np.ndarray:
    """Per-axis median spacing, with nnU-Net's 10th-percentile rule for a coarse axis.

    When one axis is more than 3x coarser than the others in spacing AND has more than
    3x fewer voxels, its median would make thin-slice cases blurry; nnU-Net takes the
    10th percentile of that axis instead (never finer than the in-plane spacing).
    """
    spacing_rows = np.vstack([np.asarray(s, dtype=float) for s in spacings])
    target = np.percentile(spacing_rows, 50, axis=0)
    target_size = np.percentile(np.vstack([np.asarray(s, dtype=float) for s in shapes]), 50, axis=0)
    worst = int(np.argmax(target))
    others = [a for a in range(len(target)) if a != worst]
    other_spacings = [target[a] for a in others]
    aniso_spacing = target[worst] > ANISOTROPY_THRESHOLD * max(other_spacings)
    aniso_voxels = target_size[worst] * ANISOTROPY_THRESHOLD < min(target_size[a] for a in others)
    if aniso_spacing and aniso_voxels:
        coarse = np.percentile(spacing_rows[:, worst], 10)
        if coarse < max(other_spacings):
            coarse = max(max(other_spacings), coarse) + 1e-5
        target[worst] = coarse
    return target


def transpose_for_spacing(target_spacing: Sequence[float]) -> tuple[list[int], list[int]]:
    """nnU-Net moves the coarsest axis first; returns (transpose_forward, transpose_backward)."""
    coarsest = int(np.argmax(target_spacing))
    forward = [coarsest] + [a for a in range(3) if a != coarsest]
    backward = [forward.index(a) for a in range(3)]
    return forward, backward


def plan_from_fingerprint(
    spacings: Sequence[Sequence[float]],
    shapes: Sequence[Sequence[int]],
    memory_reference: float = REFERENCE_VAL_3D,
    *,
    num_classes: int = 2,
    num_training_cases: int | None = None,
    normalization: dict[str, Any] | None = None,
    suppress_transpose: bool = False,
) -> dict[str, Plan]:
    """Plan "3d_fullres" and "2d" for a training set, given per-case spacings and shapes (z, y, x).

    ``num_training_cases`` defaults to the number of cases given. nnU-Net's optional
    "3d_lowres" cascade stage is not planned.
    """
    if len(spacings) == 0 or len(spacings) != len(shapes):
        raise ModelError("a fingerprint needs one spacing and one shape per case")
    low, high = PLAN_BOUNDS["spacing_mm"]
    for spacing, shape in zip(spacings, shapes):  # 0 mm planned NaN patches ("cannot convert float NaN to integer")
        if len(spacing) != 3 or not all(finite_number(v) and low <= v <= high for v in spacing):
            raise ModelError(f"a spacing of {' x '.join(f'{float(v):g}' for v in spacing)} mm cannot be planned for: "
                             f"each axis must be {low:g} to {high:g} mm")
        if len(shape) != 3 or not all(finite_number(v) and 1 <= v <= 1 << 20 for v in shape):
            raise ModelError(f"a shape of {' x '.join(str(v) for v in shape)} voxels cannot be planned for")
    cases = num_training_cases if num_training_cases is not None else len(spacings)
    target = fullres_target_spacing(spacings, shapes)
    forward, backward = (
        ([0, 1, 2], [0, 1, 2]) if suppress_transpose else transpose_for_spacing(target)
    )
    new_shapes = [
        [max(1, int(round(sp / t * sh))) for sp, t, sh in zip(spacing, target, shape)]
        for spacing, shape in zip(spacings, shapes)
    ]
    median_shape = np.median(np.asarray(new_shapes, dtype=float), axis=0)[forward]
    target_t = target[forward]
    configurations: dict[str, Plan] = {}
    if median_shape[0] != 1:
        configurations["3d_fullres"] = plan_from_spacing(
            target_t, median_shape, memory_reference, 3, num_classes=num_classes,
            num_training_cases=cases, normalization=normalization,
        )
    configurations["2d"] = plan_from_spacing(
        target_t, median_shape, memory_reference, 2, num_classes=num_classes,
        num_training_cases=cases, normalization=normalization,
    )
    for plan in configurations.values():
        plan.transpose_forward, plan.transpose_backward = list(forward), list(backward)
    return configurations
