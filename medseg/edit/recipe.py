"""Batch editing: a list of operations checked as a whole before any runs, then applied in order.

``medseg edit`` parses its options into :class:`Operation` records; :func:`validate` names
the first bad number, unknown label or locked target before anything is loaded or
written (a clean-up recipe run on 200 cases fails on case 1 in a second, not after an
hour); :func:`run_operations` applies them through the same document and tools the GUI
uses, so a batch result is exactly what the same clicks would give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import json
from pathlib import Path
from typing import Callable

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.edit import tools
from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import LabelMap
from medseg.edit.tools import PaintRules
from medseg.edit.tools.click_region import ConfidenceParameters
from medseg.edit.tools.grow_seeds import BACKGROUND_SEED, GrowParameters, check_seeds
from medseg.edit.tools.scissors import ScissorsParameters
from medseg.errors import MedsegError
from medseg.core.volume import Volume

# name: (argument kinds, description); "label" must exist, "new-label" may be new, "number" any float, "mm"/"ml" ≥ 0
OPERATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "threshold": (("number", "number", "new-label"), "LOW HIGH LABEL: paint LABEL where LOW ≤ HU ≤ HIGH (locks respected)"),
    "keep-largest": (("label",), "LABEL: keep only its largest 26-connected island"),
    "remove-smaller": (("label", "ml"), "LABEL ML: remove its islands smaller than ML millilitres"),
    "grow": (("label", "mm"), "LABEL MM: add every voxel whose centre lies within MM of the label"),
    "shrink": (("label", "mm"), "LABEL MM: remove every label voxel within MM of the outside"),
    "smooth": (("label", "mm"), "LABEL MM: Gaussian smoothing with sigma MM"),
    "fill-holes": (("label",), "LABEL: fill background enclosed by the label (3D)"),
    "interpolate": (("label",), "LABEL: fill empty axial slices between drawn ones"),
    "union": (("label", "label"), "A B: B's voxels join A"),
    "intersect": (("label", "label"), "A B: keep A only inside B's region (B with its holes filled)"),
    "subtract": (("label", "label"), "A B: remove A inside B's region (B with its holes filled)"),
    "lock": (("label",), "LABEL: protect it from every later operation"),
    "grow-from-seeds": (("seeds-file",), "SEEDS: grow the seeded labels into the image (GrowCut); the seeds are a "
                                         "label image on the image's grid"),
    "confidence-connected": (("point", "number", "new-label"), "X,Y,Z K LABEL: paint LABEL over the region around the "
                                                              "point (LPS mm) within mean ± K·SD, iterated"),
    "scissors": (("polygon-file",), "POLYGON: erase or fill inside/outside an outline (a JSON file), through the "
                                    "volume or a slab"),
}
SCISSORS_FILE_HELP = ('a JSON object: {"view": "axial"|"coronal"|"sagittal", "points_lps_mm": [[x, y, z], ...], '
                      '"operation": "erase-inside"|"erase-outside"|"fill-inside"|"fill-outside", "slab_mm": null|MM, '
                      '"label": LABEL (to fill)}')
MODIFIES = {  # which argument positions an operation changes (locked ones are refused)
    "keep-largest": (0,), "remove-smaller": (0,), "shrink": (0,), "smooth": (0,), "union": (1,),
    "intersect": (0,), "subtract": (0,),
}


@dataclass
class Operation:
    name: str
    raw: tuple[str, ...]
    args: tuple = ()

    def __str__(self) -> str:
        return f"--{self.name} {' '.join(self.raw)}"


def _label(text: str, label_map: LabelMap, op: Operation, may_be_new: bool, created: set[int]) -> int:
    names = {entry.name.lower(): value for value, entry in label_map.labels.items()}
    try:
        value = int(text)
    except ValueError:
        value = names.get(text.lower(), -1)
        if value < 0:
            known = ", ".join(sorted(names)) or "none"
            raise MedsegError(f"{op}: there is no label named {text!r} (labels: {known})") from None
    if not 1 <= value <= MAX_LABEL_VALUE:
        raise MedsegError(f"{op}: label {value} is outside 1…{MAX_LABEL_VALUE} (0 is background)")
    if not may_be_new and value not in label_map.labels and label_map.voxel_count(value) == 0 and value not in created:
        raise MedsegError(f"{op}: there is no label {value} in the label map")
    return value


def _number(text: str, op: Operation, kind: str, label_map: LabelMap) -> float:
    try:
        value = float(text)
    except ValueError:
        raise MedsegError(f"{op}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise MedsegError(f"{op}: {text!r} is not a finite number")
    if kind in ("mm", "ml") and value < 0:
        raise MedsegError(f"{op}: {kind} must not be negative, got {text}")
    # A distance beyond the image's diagonal changes nothing more, but a Gaussian or a distance
    # map of that size would run for hours (--smooth 1 1e6 ran unbounded).
    across = math.dist((0, 0, 0), [n * s for n, s in zip(label_map.size_xyz, label_map.spacing_mm)])
    if kind == "mm" and value > across:
        raise MedsegError(f"{op}: {value:g} mm is more than the whole image ({across:.0f} mm corner to corner)")
    return value


def _point(text: str, op: Operation, image: Volume | None) -> tuple[int, int, int]:
    """``X,Y,Z`` in LPS millimetres -> the voxel (z, y, x) it falls in."""
    try:
        lps = [float(v) for v in text.split(",")]
    except ValueError:
        lps = []
    if len(lps) != 3 or not all(math.isfinite(v) for v in lps):
        raise MedsegError(f"{op}: {text!r} is not a point X,Y,Z in millimetres (LPS)")
    if image is None:
        raise MedsegError(f"{op}: a point needs the image")
    index = np.rint(image.physical_to_index(lps)).astype(int)
    if any(not 0 <= i < n for i, n in zip(index, image.size_xyz)):
        raise MedsegError(f"{op}: the point {text} mm lies outside the image (voxel {tuple(int(i) for i in index)})")
    return int(index[2]), int(index[1]), int(index[0])


def _scissors_file(text: str, op: Operation, label_map: LabelMap, created: set[int]) -> dict:
    path = Path(text)
    try:
        spec = json.loads(path.read_text())
    except OSError as error:
        raise MedsegError(f"{op}: cannot read the outline file ({error.strerror or error})", path=path) from None
    except ValueError as error:
        raise MedsegError(f"{op}: the outline file is not JSON ({error})", path=path) from None
    if not isinstance(spec, dict):
        raise MedsegError(f"{op}: the outline file must hold {SCISSORS_FILE_HELP}", path=path)
    view = spec.get("view")
    lps_axis = {"sagittal": 0, "coronal": 1, "axial": 2}.get(view)  # the LPS axis the view looks along
    if lps_axis is None:
        raise MedsegError(f"{op}: \"view\" must be axial, coronal or sagittal, not {view!r}", path=path)
    points = np.asarray(spec.get("points_lps_mm", []), dtype=object)
    try:
        points = np.asarray(points.tolist(), dtype=np.float64)
    except (TypeError, ValueError):
        points = np.zeros((0, 0))
    if points.ndim != 2 or points.shape[1] != 3 or len(points) < 3 or not np.isfinite(points).all():
        raise MedsegError(f"{op}: \"points_lps_mm\" must list three or more [x, y, z] points", path=path)
    try:
        parameters = ScissorsParameters(spec.get("operation", "erase-inside"), spec.get("slab_mm"))
    except (MedsegError, TypeError) as error:
        raise MedsegError(f"{op}: {error}", path=path) from None
    value = None
    if parameters.operation.startswith("fill"):
        if "label" not in spec:
            raise MedsegError(f"{op}: filling needs a \"label\"", path=path)
        value = _label(str(spec["label"]), label_map, op, True, created)
        created.add(value)
    index_xyz = np.asarray([label_map.physical_to_index(p) for p in points])
    normal_xyz = int(np.argmax(np.abs(label_map.direction[lps_axis])))  # the index axis closest to the view's normal
    axis_zyx = 2 - normal_xyz
    plane_zyx = [a for a in range(3) if a != axis_zyx]
    points_ij = index_xyz[:, [2 - a for a in plane_zyx]]
    centre = int(np.clip(np.rint(index_xyz[:, normal_xyz].mean()), 0, label_map.shape_zyx[axis_zyx] - 1))
    return {"points": points_ij, "axis": axis_zyx, "centre": centre, "parameters": parameters, "value": value}


def _seeds_file(text: str, op: Operation, label_map: LabelMap, load_seeds: Callable | None) -> np.ndarray:
    if load_seeds is None:
        raise MedsegError(f"{op}: no way to read a seeds file here")
    seeds = load_seeds(text)
    check_seeds(seeds, label_map)
    return seeds


def validate(operations: list[Operation], label_map: LabelMap, image: Volume | None = None,
             load_seeds: Callable[[str], np.ndarray] | None = None) -> list[Operation]:
    """Resolve names to values and check every operation; raises MedsegError on the first problem.

    ``load_seeds(path)`` reads a seeds file onto the image grid (value BACKGROUND_SEED for background seeds)."""
    locked = set(label_map.locked_values())
    created: set[int] = set()  # labels an earlier --threshold makes
    for op in operations:
        kinds, _ = OPERATIONS[op.name]
        if len(op.raw) != len(kinds):
            raise MedsegError(f"{op}: needs {len(kinds)} value(s)")
        args = []
        for text, kind in zip(op.raw, kinds):
            if kind in ("label", "new-label"):
                value = _label(text, label_map, op, kind == "new-label", created)
                args.append(value)
            elif kind == "point":
                args.append(_point(text, op, image))
            elif kind == "seeds-file":
                args.append(_seeds_file(text, op, label_map, load_seeds))
            elif kind == "polygon-file":
                args.append(_scissors_file(text, op, label_map, created))
            else:
                args.append(_number(text, op, kind, label_map))
        if op.name == "threshold":
            if args[0] > args[1]:
                raise MedsegError(f"{op}: the range is empty (LOW > HIGH)")
            created.add(int(args[2]))
        if op.name == "confidence-connected":
            try:
                ConfidenceParameters(k=args[1])
            except MedsegError as error:
                raise MedsegError(f"{op}: {error}") from None
            created.add(int(args[2]))
        if op.name == "grow-from-seeds":
            created.update(int(v) for v in np.unique(args[0]) if v and v != BACKGROUND_SEED)
        if op.name in ("union", "intersect", "subtract") and args[0] == args[1]:
            raise MedsegError(f"{op}: A and B are the same label")
        for position in MODIFIES.get(op.name, ()):
            if args[position] in locked:
                raise MedsegError(f"{op}: label {args[position]} is locked by an earlier --lock")
        if op.name == "lock":
            locked.add(int(args[0]))
        op.args = tuple(args)
    return operations


def run_operations(document: SegmentationDocument, operations: list[Operation], rules: PaintRules = PaintRules(),
                   report=None, grow: GrowParameters = GrowParameters()) -> list[tuple[str, int]]:
    """Apply validated operations in order; returns (operation, voxels changed) for each."""
    done = []
    for op in operations:
        lm = document.label_map
        assert lm is not None
        a = op.args
        if op.name == "lock":
            if int(a[0]) in lm.labels:
                document.set_label_locked(int(a[0]), True)
            done.append((str(op), 0))
            continue
        delta = {
            "threshold": lambda: tools.threshold(lm, document.volume, a[0], a[1], int(a[2]), rules),
            "keep-largest": lambda: tools.keep_largest(lm, int(a[0])),
            "remove-smaller": lambda: tools.remove_smaller(lm, int(a[0]), a[1]),
            "grow": lambda: tools.grow(lm, int(a[0]), a[1], rules, document.volume),
            "shrink": lambda: tools.shrink(lm, int(a[0]), a[1]),
            "smooth": lambda: tools.smooth(lm, int(a[0]), a[1], rules, document.volume),
            "fill-holes": lambda: tools.fill_holes(lm, int(a[0])),
            "interpolate": lambda: tools.interpolate_slices(lm, int(a[0])),
            "union": lambda: tools.union(lm, int(a[0]), int(a[1]), rules),
            "intersect": lambda: tools.intersect(lm, int(a[0]), int(a[1])),
            "subtract": lambda: tools.subtract(lm, int(a[0]), int(a[1])),
            "grow-from-seeds": lambda: tools.grow_from_seeds(lm, document.volume, a[0], grow, rules),
            "confidence-connected": lambda: tools.confidence_connected(
                lm, document.volume, a[0], int(a[2]), ConfidenceParameters(k=a[1]), rules),
            "scissors": lambda: tools.scissors(lm, a[0]["points"], a[0]["axis"], a[0]["parameters"], a[0]["centre"],
                                               a[0]["value"], rules, document.volume),
        }[op.name]()
        count = delta.count if delta is not None else 0
        document.apply(delta, str(op))
        done.append((str(op), count))
        if report is not None:
            report(str(op), count)
    return done
