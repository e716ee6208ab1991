"""A model's faster CPU tier (issue #51 item 3): int8 or bf16, offered only where verified on this machine.

The exact path is float32 (PyTorch, or OpenVINO/ONNX Runtime on the exact-norm export when they compute
the same labels: medseg.model.cpu_runtime). A faster tier computes in lower precision and so not always
the same labels; it is off by default, never silent, and OFFERED for a model only when its record here
says that, on a reference series and on this machine, its labels equal the exact path's on at least
:data:`AGREEMENT_NEEDED` of the voxels and the Dice of every structure of at least
:data:`STRUCTURE_VOXELS` voxels is at least :data:`DICE_NEEDED`
(:mod:`medseg.model.precision_gate` builds and measures it; ``medseg models verify --tier int8 MODEL``).

* ``int8``: the exact-norm export quantized by NNCF's post-training quantization (OpenVINO IR, kept in
  the cache folder beside the record);
* ``bf16``: the exact-norm export compiled by OpenVINO with bf16 inference precision, only where the CPU
  computes bf16 natively (AMX or AVX-512 BF16: OpenVINO's CPU capabilities list "BF16"); elsewhere it is
  emulated, slower than float32, and is not offered.

The record (model digest, machine, precision, agreement, per-structure Dice, the quantized files' SHA-256)
is JSON written atomically. A damaged record or quantized file is refused naming the file, and the run
goes the exact way, said in its fallbacks; a tier that failed its gate says by how much and is refused.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from medseg.core.labels import Label
from medseg.errors import ModelError

EXACT, INT8, BF16 = "f32", "int8", "bf16"
PRECISIONS = (EXACT, INT8, BF16)
TIERS = (INT8, BF16)
AGREEMENT_NEEDED = 0.999  # the share of the reference series' voxels labelled as the exact path labels them
DICE_NEEDED = 0.99  # for every structure the exact path finds in at least STRUCTURE_VOXELS voxels
STRUCTURE_VOXELS = 1000
FOLDER = "precision"  # in the cache folder: the records and the quantized models
RECORD_FORMAT = "medseg-precision-tier"
TITLES = {EXACT: "float32 (exact)", INT8: "int8 (NNCF post-training quantization, OpenVINO)",
          BF16: "bf16 (OpenVINO)"}


class TierDamaged(ModelError):
    """A tier's record or quantized model file cannot be trusted (unreadable, changed since it was verified)."""


@dataclass
class TierRecord:
    """What verifying a tier found, for one model configuration, precision and machine."""

    model: str  # cpu_runtime.model_digest: the plan and weights
    configuration: str
    precision: str
    machine: dict[str, Any]  # tier_machine(): the CPU and the engine versions the numbers hold for
    offered: bool
    agreement: float = 0.0  # the share of the reference's voxels (network grid) with the exact path's label
    dice: dict[str, float] = field(default_factory=dict)  # per structure of >= STRUCTURE_VOXELS voxels
    voxels: dict[str, int] = field(default_factory=dict)  # those structures' voxels in the exact labels
    shortfalls: list[str] = field(default_factory=list)  # why it is not offered, each with its figure
    reference: str = ""  # the series it was measured on
    method: str = ""  # how the tier was made (the quantization's settings)
    seconds: dict[str, float] = field(default_factory=dict)  # the reference through the exact path and the tier
    files: dict[str, str] = field(default_factory=dict)  # the quantized model's files (name -> SHA-256)
    measured_on: str = ""
    compute: str = EXACT  # int8: what its unquantized layers compute in ("f32", or "bf16" where native)
    format: str = RECORD_FORMAT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line: "int8 offered: labels 99.95 % equal to float32's, Dice >= 0.993 (...)" or why not."""
        dice = f", lowest Dice {min(self.dice.values()):.4f} ({min(self.dice, key=self.dice.get)})" if self.dice else ""
        figures = f"labels {self.agreement:.3%} equal to float32's on {self.reference}{dice}"
        if self.offered:
            return f"{self.precision} offered (verified {self.measured_on}: {figures}{self.speed()})"
        return f"{self.precision} NOT offered: {'; '.join(self.shortfalls)}"

    def speed(self) -> str:
        """", 2.65× PyTorch float32's speed, 1.10× OpenVINO float32's" (the reference through each, one pass)."""
        tier = self.seconds.get(self.precision)
        parts = [f"{self.seconds[key] / tier:.2f}× {name} float32's" for key, name in
                 ((EXACT, "PyTorch"), ("openvino-f32", "OpenVINO")) if tier and self.seconds.get(key)]
        return f", {', '.join(parts)} speed" if parts else ""


def check_precision(precision: str) -> str:
    value = (precision or EXACT).strip().lower()
    value = {"fp32": EXACT, "float32": EXACT, "exact": EXACT}.get(value, value)
    if value not in PRECISIONS:
        raise ModelError(f"unknown precision {precision!r}", hint=f"choose one of {', '.join(PRECISIONS)}")
    return value


def tier_machine() -> dict[str, Any]:
    """What a tier's numbers depend on: the CPU (its instruction set decides int8's and bf16's kernels) and
    OpenVINO's version; not the memory or the thread count (the labels do not change with them)."""
    from medseg.model.cpu_runtime import _versions
    from medseg.model.devices import cpu_name

    return {"cpu": cpu_name(), "architecture": platform.machine(), "openvino": _versions().get("openvino")}


def bf16_support() -> tuple[bool, str]:
    """(native, why): whether this CPU computes bf16 natively, as OpenVINO's CPU plugin reports it."""
    try:
        import openvino

        capabilities = list(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    except Exception as error:  # noqa: BLE001 - no OpenVINO (or no CPU plugin): no bf16 tier, said why
        return False, f"OpenVINO cannot report this CPU's capabilities ({str(error).splitlines()[0][:80]})"
    return bf16_decision(capabilities)


def bf16_decision(capabilities: Sequence[str]) -> tuple[bool, str]:
    """(native, why) for a CPU whose OpenVINO OPTIMIZATION_CAPABILITIES are ``capabilities``: OpenVINO lists
    "BF16" only where the CPU has AMX or AVX-512 BF16; elsewhere its bf16 is emulated, slower than float32."""
    listed = ", ".join(capabilities) or "nothing"
    if "BF16" in capabilities:
        return True, f"this CPU computes bf16 natively (OpenVINO: {listed})"
    return False, (f"this CPU has neither AMX nor AVX-512 BF16 (OpenVINO reports {listed}): "
                   "bf16 would be emulated, slower than float32")


# --- the gate -----------------------------------------------------------------------------------------------


def judge(exact: np.ndarray, tier: np.ndarray, labels: Mapping[int, Label]) -> tuple[float, dict[str, float],
                                                                                   dict[str, int], list[str]]:
    """Compare a tier's labels with the exact path's: (agreement, Dice per structure of at least
    STRUCTURE_VOXELS voxels in the exact labels, those voxel counts, the shortfalls against the gate)."""
    exact, tier = np.asarray(exact), np.asarray(tier)
    if exact.shape != tier.shape:
        raise ValueError(f"label maps of different shapes: {exact.shape} and {tier.shape}")
    agreement = float(np.mean(exact == tier)) if exact.size else 0.0
    dice: dict[str, float] = {}
    voxels: dict[str, int] = {}
    shortfalls = []
    if agreement < AGREEMENT_NEEDED:
        shortfalls.append(f"labels {agreement:.3%} equal to float32's (needs {AGREEMENT_NEEDED:.1%}: "
                          f"{AGREEMENT_NEEDED - agreement:.3%} short)")
    for value, name in sorted((value, label.name) for value, label in labels.items()):
        if value == 0:
            continue
        a, b = exact == value, tier == value
        count = int(a.sum())
        if count < STRUCTURE_VOXELS:
            continue
        score = float(2 * np.logical_and(a, b).sum() / (count + int(b.sum())))
        dice[name], voxels[name] = round(score, 6), count
        if score < DICE_NEEDED:
            shortfalls.append(f"Dice of {name} {score:.4f} (needs {DICE_NEEDED}: {DICE_NEEDED - score:.4f} short)")
    return round(agreement, 6), dice, voxels, shortfalls


# --- where records and quantized models are kept --------------------------------------------------------------


def folder() -> Path:
    from medseg.app_dirs import cache_dir

    return cache_dir() / FOLDER


def _key(package: Any, configuration: str, precision: str) -> str:
    from medseg.model.cpu_runtime import model_digest

    machine = json.dumps(tier_machine(), sort_keys=True)
    return f"{model_digest(package, configuration)}-{precision}-{hashlib.sha256(machine.encode()).hexdigest()[:12]}"


def record_path(package: Any, configuration: str, precision: str) -> Path:
    return folder() / f"{_key(package, configuration, precision)}.json"


def model_path(package: Any, configuration: str, precision: str) -> Path:
    """The quantized model (OpenVINO IR: this .xml and its .bin) an int8 tier runs."""
    return folder() / f"{_key(package, configuration, precision)}.xml"


# The window checks the verified files each time a study opens (to offer the tier), on the GUI thread: a file's
# digest is kept while its size and modification time stay the same, so a large model is hashed once a session.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """The file's SHA-256 (medseg.io.digest), remembered for as long as its size and modification time hold."""
    from medseg.io.digest import sha256_file

    status = path.stat()
    key = (str(path), status.st_size, status.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = sha256_file(path)
    return _DIGESTS[key]


def write_record(record: TierRecord, path: Path) -> Path:
    from medseg.io.atomic import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(record.to_dict(), indent=1))


def read_record(path: Path) -> TierRecord:
    """The record at ``path``; TierDamaged naming it when it is not one (unreadable, truncated, edited)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            raise ValueError(f"not a {RECORD_FORMAT} record")
        record = TierRecord(**data)
        if record.precision not in TIERS or not isinstance(record.offered, bool) or \
                record.compute not in (EXACT, BF16) or \
                not isinstance(record.files, dict) or not 0.0 <= float(record.agreement) <= 1.0:
            raise ValueError("its fields are not a tier's")
    except (OSError, ValueError, TypeError) as error:
        raise TierDamaged(f"the precision record is damaged ({str(error).splitlines()[0][:120]})", path=path,
                          hint="verify the tier again: medseg models verify --tier PRECISION MODEL") from error
    return record


def stored(package: Any, configuration: str, precision: str) -> TierRecord | None:
    """The record of this tier for this model and machine (None: never verified here); TierDamaged when damaged."""
    path = record_path(package, configuration, precision)
    return read_record(path) if path.is_file() else None


def check_files(record: TierRecord, xml: Path) -> None:
    """The quantized model's files are the ones verified (TierDamaged naming the first that is not)."""
    for name, digest in sorted(record.files.items()):
        path = xml.with_name(name)
        if not path.is_file():
            raise TierDamaged(f"the {record.precision} model file is missing", path=path,
                              hint=f"verify the tier again: medseg models verify --tier {record.precision} MODEL")
        if file_digest(path) != digest:
            raise TierDamaged(f"the {record.precision} model file changed since it was verified (its SHA-256 "
                              "differs from the record's)", path=path,
                              hint=f"verify the tier again: medseg models verify --tier {record.precision} MODEL")


def offered_record(package: Any, configuration: str, precision: str) -> TierRecord:
    """The verified record a run with ``precision`` uses. ModelError when the tier was never verified here or
    failed its gate (by how much); TierDamaged when its record or files are damaged."""
    record = stored(package, configuration, precision)
    if record is None:
        raise ModelError(f"{precision} is not offered for {package.name} ({configuration}) on this computer: it "
                         "was never verified here",
                         hint=f"verify it first: medseg models verify --tier {precision} MODEL (or run without "
                              "--precision: the exact float32 path)")
    if not record.offered:
        raise ModelError(f"{precision} is not offered for {package.name} ({configuration}) on this computer: "
                         f"it failed its gate ({'; '.join(record.shortfalls)})",
                         hint="run without --precision: the exact float32 path")
    if precision == INT8:
        check_files(record, model_path(package, configuration, precision))
    return record


def tier_runner(package: Any, configuration: str, precision: str, shape: Sequence[int],
                threads: int | None = None) -> Any:
    """The runner of an offered tier (see :func:`offered_record` for its refusals)."""
    from medseg.model.backends import OpenVinoRunner
    from medseg.model.cpu_runtime import exact_onnx

    record = offered_record(package, configuration, precision)
    if precision == INT8:  # the quantized graph runs its int8 ops; the rest as verified (float32, or bf16)
        source, hint = model_path(package, configuration, precision), record.compute
    else:
        source, hint = exact_onnx(package, configuration), BF16
    try:
        return OpenVinoRunner(source, hint, threads=threads, name=f"openvino-{precision}", shape=shape)
    except ModelError as error:
        raise TierDamaged(f"the {precision} model file cannot be compiled: {error.message}", path=source) from error


def algorithm_version(version: str, precision: str) -> str:
    """What the labels' algorithm version says of a run in ``precision``: the model's version, and the tier."""
    if precision == EXACT:
        return version
    if not version:
        return precision
    marker = f" ({precision})"
    # a DICOM SEG keeps 64 characters of it (the LO value representation): the model's version gives way, not
    # the marker, or a long version would hide that a tier ran
    return (version if len(version) + len(marker) <= 64 else version[:63 - len(marker)] + "…") + marker


def plan_line(package: Any, configuration: str) -> str:
    """The plan's line on precision: the exact path, and each tier verified here (offered or not, why)."""
    parts = []
    for precision in TIERS:
        try:
            record = stored(package, configuration, precision)
        except TierDamaged as error:
            parts.append(f"{precision}: record damaged ({error.path})")
            continue
        if record is not None:
            parts.append(record.describe())
    verified = "; ".join(parts) if parts else ("no faster tier verified here (medseg models verify --tier int8 "
                                                "MODEL)")
    return f"precision: float32, the exact path (--precision int8/bf16 where offered; {verified})"


__all__ = ["AGREEMENT_NEEDED", "BF16", "DICE_NEEDED", "EXACT", "INT8", "PRECISIONS", "STRUCTURE_VOXELS", "TIERS",
           "TierDamaged", "TierRecord", "algorithm_version", "bf16_decision", "bf16_support", "check_precision", "judge",
           "offered_record", "plan_line", "read_record", "stored", "tier_runner", "write_record"]
