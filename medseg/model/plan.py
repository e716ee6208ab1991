"""Plan a U-Net from voxel spacing and image shape, with nnU-Net v2's rules.

A :class:`Plan` says how a network sees a CT series: the spacing it is resampled to,
the patch it is cut into, how many resolution stages the U-Net has and, for each stage
and axis, the stride and the kernel size. A thick-slice CT (5 mm slices, 0.7 mm pixels)
gets kernel 1 and stride 1 along z until the in-plane axes have been pooled to a
comparable spacing; an isotropic CT pools all axes from the start.

The rules and constants are those of nnU-Net v2 (``ExperimentPlanner``, default
PlainConvUNet planner, version 2.8.1, and ``network_topology.get_pool_and_conv_props``);
they are written down below so that a plan made here equals the one nnU-Net makes, which
the tests check against nnU-Net itself.

Axis conventions: all tuples are in the network's axis order: the image array's ``(z, y, x)``
with ``transpose_forward`` applied (``(y, x)`` for 2D patch sizes). medseg's own plans never
transpose, so for them this is ``(z, y, x)``; an imported nnU-Net plan may move its coarsest axis
first, and then ``target_spacing_transposed`` and ``patch_size`` are in that order, exactly as in
nnU-Net's plans.json. ``target_spacing_image_zyx`` gives the target in the image's own order.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from medseg.errors import ModelError

# --- nnU-Net v2 constants (nnunetv2/experiment_planning/experiment_planners) ------------
ANISOTROPY_THRESHOLD = 3.0  # nnunetv2.configuration.ANISO_THRESHOLD
MIN_SLICES_3D = 3  # a series with fewer slices gets a model's 2D configuration when it has one
FEATUREMAP_MIN_EDGE_LENGTH = 4  # UNet_featuremap_min_edge_length: bottleneck edge >= 4
MAX_NUMPOOL = 999999  # v2 has no pooling cap: depth is limited by the patch size only
BASE_NUM_FEATURES = 32  # UNet_base_num_features
MAX_FEATURES_3D = 320  # UNet_max_features_3d
MAX_FEATURES_2D = 512  # UNet_max_features_2d
REFERENCE_VAL_3D = 560_000_000  # UNet_reference_val_3d: activation count that fits 8 GB
REFERENCE_VAL_2D = 85_000_000  # UNet_reference_val_2d
REFERENCE_BATCH_SIZE_3D = 2  # UNet_reference_val_corresp_bs_3d
REFERENCE_BATCH_SIZE_2D = 12  # UNet_reference_val_corresp_bs_2d
MIN_BATCH_SIZE = 2  # UNet_min_batch_size
MAX_DATASET_COVERED = 0.05  # a batch never covers more than 5 % of the training voxels
INITIAL_PATCH_EDGE_3D = 256  # initial 3D patch has the volume of 256^3
INITIAL_PATCH_EDGE_2D = 2048  # initial 2D patch has the area of 2048^2
CONVS_PER_STAGE_ENCODER = 2
CONVS_PER_STAGE_DECODER = 2

# nnU-Net's default resampling: cubic B-spline for images, linear for segmentations and
# logits, nearest along z when the spacing is anisotropic (separate-z, threshold 3).
DEFAULT_RESAMPLING: dict[str, Any] = {
    "data": {"order": 3, "order_z": 0, "force_separate_z": None},
    "seg": {"order": 1, "order_z": 0, "force_separate_z": None},
    "probabilities": {"order": 1, "order_z": 0, "force_separate_z": None},
}

NORMALIZATION_SCHEMES = (
    "CTNormalization",
    "ZScoreNormalization",
    "NoNormalization",
    "RescaleTo01Normalization",
    "RGBTo01Normalization",
)
ARCHITECTURES = ("PlainConvUNet", "ResidualEncoderUNet")
CT_NORMALIZATION_KEYS = ("mean", "std", "percentile_00_5", "percentile_99_5")


@dataclass
class Plan:
    """One network configuration: target spacing, patch, topology, batch, normalization."""

    name: str
    dim: int
    # In the network's axis order (transpose_forward applied; see the module doc). model.json
    # files before format 3 call it "target_spacing_zyx" (read as this).
    target_spacing_transposed: tuple[float, float, float]
    patch_size: tuple[int, ...]
    strides: list[list[int]]
    kernel_sizes: list[list[int]]
    features_per_stage: list[int]
    n_conv_per_stage_encoder: list[int]
    n_conv_per_stage_decoder: list[int]
    batch_size: int = MIN_BATCH_SIZE
    normalization: dict[str, Any] = field(default_factory=lambda: {"scheme": "ZScoreNormalization"})
    num_input_channels: int = 1
    use_mask_for_norm: bool = False
    anisotropy_threshold: float = ANISOTROPY_THRESHOLD
    resampling: dict[str, Any] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_RESAMPLING.items()})
    transpose_forward: list[int] = field(default_factory=lambda: [0, 1, 2])
    transpose_backward: list[int] = field(default_factory=lambda: [0, 1, 2])
    # Patch axes along which mirroring test-time augmentation is allowed; () = none.
    # None (the default) means all axes.
    mirror_axes: tuple[int, ...] | None = None
    median_shape: tuple[int, ...] | None = None
    # "PlainConvUNet" (n_conv_per_stage_encoder = convs per stage) or "ResidualEncoderUNet"
    # (nnU-Net's ResEnc presets: n_conv_per_stage_encoder = residual blocks per stage).
    architecture: str = "PlainConvUNet"
    # Array orientation the network works in ("LPS", see medseg.io.orientation); None = the
    # image array as stored, as nnU-Net does (imported nnU-Net models).
    orientation: str | None = None

    def __post_init__(self) -> None:
        self.target_spacing_transposed = tuple(float(s) for s in self.target_spacing_transposed)  # type: ignore[assignment]
        self.patch_size = tuple(int(p) for p in self.patch_size)
        self.strides = [[int(s) for s in stage] for stage in self.strides]
        self.kernel_sizes = [[int(k) for k in stage] for stage in self.kernel_sizes]
        self.features_per_stage = [int(f) for f in self.features_per_stage]
        self.n_conv_per_stage_encoder = [int(n) for n in self.n_conv_per_stage_encoder]
        self.n_conv_per_stage_decoder = [int(n) for n in self.n_conv_per_stage_decoder]
        self.batch_size = int(self.batch_size)
        self.transpose_forward = [int(a) for a in self.transpose_forward]
        self.transpose_backward = [int(a) for a in self.transpose_backward]
        if self.mirror_axes is None and self.dim in (2, 3):
            self.mirror_axes = tuple(range(self.dim))
        elif self.mirror_axes is not None:
            self.mirror_axes = tuple(int(a) for a in self.mirror_axes)
        if self.median_shape is not None:
            self.median_shape = tuple(int(s) for s in self.median_shape)
        self.validate()

    # -- consistency ----------------------------------------------------------------
    def validate(self) -> None:
        """Raise ModelError when the fields do not describe a buildable U-Net of a sane size."""
        problems = _out_of_bounds(self)
        if problems:  # the checks below would build or iterate over absurd sizes
            raise ModelError(f"invalid plan {self.name!r}: " + "; ".join(problems))
        if self.dim not in (2, 3):
            problems.append(f"dim must be 2 or 3, not {self.dim}")
        if len(self.target_spacing_transposed) != 3 or any(not s > 0 for s in self.target_spacing_transposed):
            problems.append(f"target_spacing_transposed must be 3 positive numbers, not {self.target_spacing_transposed}")
        n = len(self.strides)
        if n < 1:
            problems.append("a plan needs at least one stage")
        for label, seq, want in (
            ("kernel_sizes", self.kernel_sizes, n),
            ("features_per_stage", self.features_per_stage, n),
            ("n_conv_per_stage_encoder", self.n_conv_per_stage_encoder, n),
            ("n_conv_per_stage_decoder", self.n_conv_per_stage_decoder, n - 1),
        ):
            if len(seq) != want:
                problems.append(f"{label} has {len(seq)} entries, expected {want}")
        for label, stages in (("strides", self.strides), ("kernel_sizes", self.kernel_sizes)):
            if any(len(stage) != self.dim for stage in stages):
                problems.append(f"every entry of {label} needs {self.dim} values")
        if any(k % 2 == 0 for stage in self.kernel_sizes for k in stage):
            problems.append("kernel sizes must be odd (same padding)")
        if len(self.patch_size) != self.dim:
            problems.append(f"patch_size {self.patch_size} does not have {self.dim} axes")
        if self.architecture not in ARCHITECTURES:
            problems.append(f"architecture {self.architecture!r} is not one of {', '.join(ARCHITECTURES)}")
        scheme = self.normalization.get("scheme")
        if scheme not in NORMALIZATION_SCHEMES:
            problems.append(f"unknown normalization scheme {scheme!r}")
        if scheme == "CTNormalization":
            missing = [k for k in CT_NORMALIZATION_KEYS if k not in self.normalization]
            if missing:
                problems.append(f"CTNormalization needs the stored intensity properties {missing}")
        if sorted(self.transpose_forward) != [0, 1, 2] or sorted(self.transpose_backward) != [0, 1, 2]:
            problems.append("transpose_forward/backward must be permutations of 0, 1, 2")
        if problems:
            raise ModelError(f"invalid plan {self.name!r}: " + "; ".join(problems))

    # -- derived values -------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        return len(self.strides)

    @property
    def pool_per_axis(self) -> list[int]:
        """How many times each axis is halved on the way to the bottleneck."""
        return [sum(1 for stage in self.strides if stage[axis] == 2) for axis in range(self.dim)]

    @property
    def shape_divisor(self) -> list[int]:
        """Each patch/input edge must be a multiple of this (2 ** pool count per axis)."""
        divisor = [1] * self.dim
        for stage in self.strides:
            divisor = [d * s for d, s in zip(divisor, stage)]
        return divisor

    @property
    def target_spacing_image_zyx(self) -> tuple[float, float, float]:
        """The target spacing in the image array's own (z, y, x) order (transpose_backward applied)."""
        return tuple(self.target_spacing_transposed[a] for a in self.transpose_backward)  # type: ignore[return-value]

    def target_spacing_for(self, image_spacing_zyx: Sequence[float]) -> tuple[float, float, float]:
        """The spacing an image is resampled to. 2D plans keep the image's own axis-0 spacing.

        Both the argument and the result are in the plan's (transposed) axis order.
        """
        target = self.target_spacing_transposed
        if self.dim == 3:
            return target
        return (float(image_spacing_zyx[0]), target[1], target[2])

    # -- serialization --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["target_spacing_transposed"] = list(self.target_spacing_transposed)
        data["patch_size"] = list(self.patch_size)
        data["mirror_axes"] = list(self.mirror_axes) if self.mirror_axes is not None else None
        data["median_shape"] = list(self.median_shape) if self.median_shape is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        """A plan from a model file: any wrong type, missing field or absurd value is a ModelError."""
        if not isinstance(data, dict):
            raise ModelError(f"a plan must be a JSON object, not {type(data).__name__}")
        data = dict(data)
        if "target_spacing_zyx" in data and "target_spacing_transposed" not in data:
            # model.json before format 3 (e.g. the starter): the same values under the old, misleading name
            data["target_spacing_transposed"] = data.pop("target_spacing_zyx")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ModelError(f"plan has unknown fields {sorted(unknown)}")
        for key, value in data.items():
            kind = _FIELD_KINDS.get(key)
            if kind is not None and not _is_kind(value, kind):
                raise ModelError(f"plan field {key!r} must be {kind}, not {json_type(value)}")
        try:
            values = dict(data)
            if "mirror_axes" in values and values["mirror_axes"] is not None:
                values["mirror_axes"] = tuple(values["mirror_axes"])
            return cls(**values)
        except ModelError:
            raise
        except TypeError as error:
            raise ModelError(f"plan is incomplete or has a value of the wrong type: {error}") from error
        except (ValueError, OverflowError, AttributeError, KeyError, IndexError) as error:
            raise ModelError(f"plan has a value of the wrong type: {type(error).__name__}: {error}"[:300]) from error

    def __str__(self) -> str:
        axes = ["zyx"[a] for a in self.transpose_forward][3 - self.dim:]  # the image axes of the patch's axes
        spacing = " x ".join(f"{s:.3g}" for s in self.target_spacing_image_zyx)
        lines = [
            f"Plan {self.name!r} ({self.dim}D U-Net, {self.num_stages} stages"
            + ("" if self.architecture == "PlainConvUNet" else ", residual encoder") + ")",
            f"  target spacing (z, y, x): {spacing} mm",
            f"  patch ({', '.join(axes)}): {' x '.join(str(p) for p in self.patch_size)}   batch size {self.batch_size}",
            f"  normalization: {self._normalization_text()}",
            f"  stage  features  stride   kernel  {'convs' if self.architecture == 'PlainConvUNet' else 'res. blocks'}",
        ]
        for s in range(self.num_stages):
            lines.append(
                f"  {s:>5}  {self.features_per_stage[s]:>8}  {_axes_text(self.strides[s]):<7}  "
                f"{_axes_text(self.kernel_sizes[s]):<6}  {self.n_conv_per_stage_encoder[s]}"
            )
        return "\n".join(lines)

    def _normalization_text(self) -> str:
        norm = self.normalization
        if norm.get("scheme") == "CTNormalization":
            return (
                f"CT: clip to [{norm['percentile_00_5']:.1f}, {norm['percentile_99_5']:.1f}] HU, "
                f"z-score with mean {norm['mean']:.1f}, std {norm['std']:.1f}"
            )
        return str(norm.get("scheme"))


_FIELD_KINDS = {
    "name": "a string", "architecture": "a string", "orientation": "a string or null",
    "dim": "a whole number", "batch_size": "a whole number", "num_input_channels": "a whole number",
    "anisotropy_threshold": "a number", "use_mask_for_norm": "true or false",
    "target_spacing_transposed": "a list of numbers", "patch_size": "a list of numbers",
    "features_per_stage": "a list of numbers", "n_conv_per_stage_encoder": "a list of numbers",
    "n_conv_per_stage_decoder": "a list of numbers", "transpose_forward": "a list of numbers",
    "transpose_backward": "a list of numbers", "mirror_axes": "a list of numbers or null",
    "median_shape": "a list of numbers or null", "strides": "a list of lists of numbers",
    "kernel_sizes": "a list of lists of numbers", "normalization": "an object", "resampling": "an object",
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_kind(value: Any, kind: str) -> bool:
    if kind.endswith(" or null") and value is None:
        return True
    kind = kind.removesuffix(" or null")
    if kind == "a string":
        return isinstance(value, str)
    if kind == "a whole number":
        return _number(value) and float(value).is_integer()
    if kind == "a number":
        return _number(value)
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "an object":
        return isinstance(value, dict)
    if kind == "a list of numbers":
        return isinstance(value, (list, tuple)) and all(_number(v) for v in value)
    if kind == "a list of lists of numbers":
        return isinstance(value, (list, tuple)) and all(_is_kind(v, "a list of numbers") for v in value)
    return True


def json_type(value: Any) -> str:
    """How a JSON reader would name ``value``'s type (for messages about model files)."""
    names = {dict: "an object", list: "a list", tuple: "a list", str: "a string", bool: "true/false",
             type(None): "null", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


# What any U-Net medseg can run stays within; a model file outside them is damaged or hostile
# (a patch of 1e9 voxels or 5000 stages would exhaust memory before any check could run).
PLAN_BOUNDS = {
    "stages": (1, 12), "patch_edge": (1, 2048), "patch_voxels": (1, 1 << 25), "features": (1, 4096),
    "convs": (1, 16), "stride": (1, 8), "kernel": (1, 15), "batch_size": (1, 4096), "channels": (1, 16),
    "spacing_mm": (0.01, 100.0),
}


def _out_of_bounds(plan: "Plan") -> list[str]:
    b = PLAN_BOUNDS
    problems = []

    def within(label: str, values: Sequence[float], bound: str) -> None:
        low, high = b[bound]
        odd = [v for v in values if not (low <= v <= high)]
        if odd:
            problems.append(f"{label} {odd[:3]} outside {low:g}..{high:g}")

    if not b["stages"][0] <= len(plan.strides) <= b["stages"][1]:
        problems.append(f"{len(plan.strides)} stages (at most {b['stages'][1]})")
    within("patch_size", plan.patch_size, "patch_edge")
    voxels = 1
    for edge in plan.patch_size:
        voxels *= max(1, edge)
    within("patch voxels", [voxels], "patch_voxels")
    within("features_per_stage", plan.features_per_stage, "features")
    within("convolutions per stage", [*plan.n_conv_per_stage_encoder, *plan.n_conv_per_stage_decoder], "convs")
    within("strides", [v for stage in plan.strides for v in stage], "stride")
    within("kernel_sizes", [v for stage in plan.kernel_sizes for v in stage], "kernel")
    within("batch_size", [plan.batch_size], "batch_size")
    within("num_input_channels", [plan.num_input_channels], "channels")
    within("target_spacing_transposed (mm)", plan.target_spacing_transposed, "spacing_mm")
    if plan.median_shape is not None:
        within("median_shape", plan.median_shape, "patch_voxels")
    norm = plan.normalization if isinstance(plan.normalization, dict) else {}
    if norm.get("scheme", "CTNormalization") == "CTNormalization":
        given = {k: norm[k] for k in ("mean", "std", "percentile_00_5", "percentile_99_5") if k in norm}
        odd = [k for k, v in given.items() if not _number(v)]
        if odd:  # a NaN mean turned every voxel into NaN, a label map of one class
            problems.append(f"normalization {', '.join(odd)} not a finite number")
        elif given.get("std", 1) <= 0 or given.get("percentile_00_5", 0) > given.get("percentile_99_5", 0):
            problems.append("normalization std not positive or percentiles reversed")
    return problems


def _axes_text(values: Sequence[int]) -> str:
    return "x".join(str(v) for v in values)


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
        if len(spacing) != 3 or not all(_number(v) and low <= v <= high for v in spacing):
            raise ModelError(f"a spacing of {' x '.join(f'{float(v):g}' for v in spacing)} mm cannot be planned for: "
                             f"each axis must be {low:g} to {high:g} mm")
        if len(shape) != 3 or not all(_number(v) and 1 <= v <= 1 << 20 for v in shape):
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


# --- choosing a configuration for a series -------------------------------------------
def is_anisotropic(spacing_zyx: Sequence[float], threshold: float = ANISOTROPY_THRESHOLD) -> bool:
    """nnU-Net's rule (``get_do_separate_z``): the coarsest axis is over ``threshold`` times the finest.

    The one anisotropy test: configuration choice and the separate-z resampling both use it.
    """
    return bool(max(spacing_zyx) / min(spacing_zyx) > threshold)


@dataclass(frozen=True)
class ConfigurationChoice:
    """Which configuration a series gets and why: each candidate's target against the series."""

    chosen: Plan
    series_spacing_zyx: tuple[float, float, float]
    series_anisotropic: bool
    candidates: tuple[tuple[str, bool, float], ...]  # (name, suits the series' kind, log-distance of targets)
    few_slices: bool = False  # fewer than MIN_SLICES_3D slices: 2D configurations preferred

    @property
    def reason(self) -> str:
        if self.few_slices and self.chosen.dim == 2 and len(self.candidates) > 1:
            return (f"the series has fewer than {MIN_SLICES_3D} slices: no 3D context for a 3D configuration, "
                    f"so the 2D configuration {self.chosen.name}")
        kind = "thick-slice" if self.series_anisotropic else "near-isotropic"
        ratio = max(self.series_spacing_zyx) / min(self.series_spacing_zyx)
        series = " × ".join(f"{s:.3g}" for s in self.series_spacing_zyx)
        if len(self.candidates) == 1:
            return f"the model's only configuration (series {series} mm)"
        suited = [name for name, suits, _ in self.candidates if suits]
        text = (f"series {series} mm is {kind} (coarsest/finest axis {ratio:.1f}, threshold "
                f"{ANISOTROPY_THRESHOLD:g}); ")
        if suited:
            text += f"configurations made for {kind} data: {', '.join(suited)}; "
        else:
            text += f"no configuration is made for {kind} data, so all compete; "
        return text + f"nearest target spacing: {self.chosen.name}"


def choose_configuration(configs: dict[str, Plan], spacing_zyx: Sequence[float],
                         shape_zyx: Sequence[int] | None = None) -> ConfigurationChoice:
    """Pick the configuration that suits a series of this spacing (and shape), with the reasons.

    A series of fewer than three slices (``shape_zyx``) gets a 2D configuration when the model
    has one: a 3D network would see mostly padding. Otherwise a thick-slice series (coarsest
    axis > 3x the finest) prefers configurations made for anisotropic data (2D, or 3D with an
    anisotropic target spacing or a first stage that does not convolve along one axis, as the
    planner makes for slices over twice the pixel size), a near-isotropic one prefers isotropic
    3D configurations; among those, the one whose target spacing is nearest in log scale wins,
    and 3D wins a tie.
    """
    if not configs:
        raise ModelError("the model has no configurations to choose from")
    if len(spacing_zyx) != 3 or any(not s > 0 for s in spacing_zyx):
        raise ModelError(f"cannot choose a configuration for spacing {tuple(spacing_zyx)}")
    series_aniso = is_anisotropic(spacing_zyx)

    def suits_anisotropic(plan: Plan) -> bool:
        # e.g. 5 x 2 x 2 mm is under the threshold of 3, yet its plan keeps z flat (kernel 1)
        # until in-plane catches up: it was made for thick slices
        flat_axis = plan.dim == 3 and 1 in plan.kernel_sizes[0]
        return plan.dim == 2 or flat_axis or is_anisotropic(plan.target_spacing_transposed, plan.anisotropy_threshold)

    def distance(plan: Plan) -> tuple[float, int, str]:
        # The full target (also for 2D, whose axis 0 is the 3D target) so that a 2D and a
        # 3D plan of the same spacing tie and the 3D one wins. Targets are stored in the
        # plan's transposed axis order.
        target = plan.target_spacing_transposed
        series = [spacing_zyx[axis] for axis in plan.transpose_forward]
        log_gap = sum(abs(math.log(s / t)) for s, t in zip(series, target))
        return (round(log_gap, 9), 0 if plan.dim == 3 else 1, plan.name)

    few_slices = shape_zyx is not None and min(shape_zyx) < MIN_SLICES_3D
    if few_slices and any(plan.dim == 2 for plan in configs.values()):
        suits = {name: plan.dim == 2 for name, plan in configs.items()}
    else:
        suits = {name: suits_anisotropic(plan) == series_aniso for name, plan in configs.items()}
    candidates = [p for name, p in configs.items() if suits[name]] or list(configs.values())
    chosen = min(candidates, key=distance)
    rows = tuple((name, suits[name], distance(plan)[0]) for name, plan in configs.items())
    return ConfigurationChoice(chosen, tuple(float(s) for s in spacing_zyx), series_aniso, rows,  # type: ignore[arg-type]
                               few_slices)


def select_configuration(configs: dict[str, Plan], spacing_zyx: Sequence[float],
                         shape_zyx: Sequence[int] | None = None) -> Plan:
    """The configuration :func:`choose_configuration` picks for a series of this spacing (and shape)."""
    return choose_configuration(configs, spacing_zyx, shape_zyx).chosen
