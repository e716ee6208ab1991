"""The :class:`Plan` record: how a U-Net sees a CT series, its validation and its JSON form.

A :class:`Plan` says how a network sees a CT series: the spacing it is resampled to,
the patch it is cut into, how many resolution stages the U-Net has and, for each stage
and axis, the stride and the kernel size. A thick-slice CT (5 mm slices, 0.7 mm pixels)
gets kernel 1 and stride 1 along z until the in-plane axes have been pooled to a
comparable spacing; an isotropic CT pools all axes from the start.

Plans are made by nnU-Net v2's rules in :mod:`medseg.model.planner`; a model's configuration
is picked for a series in :mod:`medseg.model.configuration_choice`. This module holds the
record every other part reads, the bounds a model file must stay within, and nnU-Net's
anisotropy test (shared by the configuration choice and the separate-z resampling).

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

from medseg.errors import ModelError

# --- nnU-Net v2 constants a plan's own fields default to (the planner's are in medseg.model.planner)
ANISOTROPY_THRESHOLD = 3.0  # nnunetv2.configuration.ANISO_THRESHOLD
MIN_BATCH_SIZE = 2  # UNet_min_batch_size

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


def finite_number(value: Any) -> bool:
    """A real number that JSON can hold: not a bool, not NaN, not infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_kind(value: Any, kind: str) -> bool:
    if kind.endswith(" or null") and value is None:
        return True
    kind = kind.removesuffix(" or null")
    if kind == "a string":
        return isinstance(value, str)
    if kind == "a whole number":
        return finite_number(value) and float(value).is_integer()
    if kind == "a number":
        return finite_number(value)
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "an object":
        return isinstance(value, dict)
    if kind == "a list of numbers":
        return isinstance(value, (list, tuple)) and all(finite_number(v) for v in value)
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
        odd = [k for k, v in given.items() if not finite_number(v)]
        if odd:  # a NaN mean turned every voxel into NaN, a label map of one class
            problems.append(f"normalization {', '.join(odd)} not a finite number")
        elif given.get("std", 1) <= 0 or given.get("percentile_00_5", 0) > given.get("percentile_99_5", 0):
            problems.append("normalization std not positive or percentiles reversed")
    return problems


def _axes_text(values: Sequence[int]) -> str:
    return "x".join(str(v) for v in values)


def is_anisotropic(spacing_zyx: Sequence[float], threshold: float = ANISOTROPY_THRESHOLD) -> bool:
    """nnU-Net's rule (``get_do_separate_z``): the coarsest axis is over ``threshold`` times the finest.

    The one anisotropy test: configuration choice and the separate-z resampling both use it.
    """
    return bool(max(spacing_zyx) / min(spacing_zyx) > threshold)
