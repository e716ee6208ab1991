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

from medseg.edit import tools
from medseg.edit.document import ViewerDocument
from medseg.edit.label_map import LabelMap
from medseg.edit.tools import PaintRules
from medseg.errors import MedsegError

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
}
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
    if not 1 <= value <= 65535:
        raise MedsegError(f"{op}: label {value} is outside 1…65535 (0 is background)")
    if not may_be_new and value not in label_map.labels and label_map.voxel_count(value) == 0 and value not in created:
        raise MedsegError(f"{op}: there is no label {value} in the label map")
    return value


def _number(text: str, op: Operation, kind: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise MedsegError(f"{op}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise MedsegError(f"{op}: {text!r} is not a finite number")
    if kind in ("mm", "ml") and value < 0:
        raise MedsegError(f"{op}: {kind} must not be negative, got {text}")
    return value


def validate(operations: list[Operation], label_map: LabelMap) -> list[Operation]:
    """Resolve names to values and check every operation; raises MedsegError on the first problem."""
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
            else:
                args.append(_number(text, op, kind))
        if op.name == "threshold":
            if args[0] > args[1]:
                raise MedsegError(f"{op}: the range is empty (LOW > HIGH)")
            created.add(int(args[2]))
        if op.name in ("union", "intersect", "subtract") and args[0] == args[1]:
            raise MedsegError(f"{op}: A and B are the same label")
        for position in MODIFIES.get(op.name, ()):
            if args[position] in locked:
                raise MedsegError(f"{op}: label {args[position]} is locked by an earlier --lock")
        if op.name == "lock":
            locked.add(int(args[0]))
        op.args = tuple(args)
    return operations


def run_operations(document: ViewerDocument, operations: list[Operation], rules: PaintRules = PaintRules(),
                   report=None) -> list[tuple[str, int]]:
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
        }[op.name]()
        count = delta.count if delta is not None else 0
        document.apply(delta, str(op))
        done.append((str(op), count))
        if report is not None:
            report(str(op), count)
    return done
