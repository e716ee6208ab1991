"""Batch editing: a list of operations checked as a whole before any runs, then applied in order.

``medseg edit`` parses its options into :class:`Operation` records; :func:`validate` names
the first bad number, unknown label or locked target before anything is loaded or
written (a clean-up recipe run on 200 cases fails on case 1 in a second, not after an
hour); :func:`run_operations` applies them through the same document and tools the GUI
uses, so a batch result is exactly what the same clicks would give.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.volume import Volume
from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import LabelMap
from medseg.edit.operations import CATALOGUE, SCISSORS_FILE_HELP, VIEWS, Context
from medseg.edit.tool_parameters import ScissorsParameters
from medseg.edit.tools import PaintRules
from medseg.edit.tools.grow_seeds import BACKGROUND_SEED, check_seeds
from medseg.errors import MedsegError

OPERATIONS = tuple(CATALOGUE)  # the recipe's names are the catalogue's


@dataclass
class Operation:
    name: str
    raw: tuple[str, ...]
    values: dict = field(default_factory=dict)  # by the catalogue's parameter names, once validated

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


def _number(text: str, op: Operation, label_map: LabelMap, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise MedsegError(f"{op}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise MedsegError(f"{op}: {text!r} is not a finite number")
    # A distance beyond the image's diagonal changes nothing more, but a Gaussian or a distance
    # map of that size would run for hours (--smooth 1 1e6 ran unbounded).
    across = math.dist((0, 0, 0), [n * s for n, s in zip(label_map.size_xyz, label_map.spacing_mm)])
    if unit == "mm" and value > across:
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


def _view(text: str, op: Operation, label_map: LabelMap) -> int:
    """A view name -> the index axis (z, y, x) closest to the direction it looks along."""
    lps_axis = VIEWS.get(text.strip().lower())
    if lps_axis is None:
        raise MedsegError(f"{op}: the view must be axial, coronal or sagittal, not {text!r}")
    return 2 - int(np.argmax(np.abs(label_map.direction[lps_axis])))


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
    lps_axis = VIEWS.get(view)  # the LPS axis the view looks along
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


def _segmentation_file(text: str, op: Operation, load_segmentation: Callable | None):
    if load_segmentation is None:
        raise MedsegError(f"{op}: no way to read a segmentation file here")
    return load_segmentation(text)


def _model(text: str, op: Operation, load_model: Callable | None):
    """A model reference: opened now when the caller can (an unknown model fails before anything runs)."""
    if not text.strip():
        raise MedsegError(f"{op}: MODEL is empty (give 'starter', a model id or a model folder)")
    return load_model(text) if load_model is not None else text


def _choice(text: str, op: Operation, parameter) -> str:
    if text not in parameter.choices:
        raise MedsegError(f"{op}: {parameter.metavar} must be {' or '.join(parameter.choices)}, not {text!r}")
    return text


def _points(text: str, op: Operation, image: Volume | None) -> list[tuple[float, float, float]]:
    """``X,Y,Z;X,Y,Z;…`` in LPS millimetres -> continuous voxel positions (z, y, x) along the path."""
    if image is None:
        raise MedsegError(f"{op}: a path needs the image")
    found = []
    for part in (p for p in text.split(";") if p.strip()):
        _point(part, op, image)  # each inside the image, or named
        index = image.physical_to_index([float(v) for v in part.split(",")])
        found.append((float(index[2]), float(index[1]), float(index[0])))
    if not found:
        raise MedsegError(f"{op}: the path {text!r} has no point X,Y,Z")
    return found


def validate(operations: list[Operation], label_map: LabelMap, image: Volume | None = None,
             load_seeds: Callable[[str], np.ndarray] | None = None,
             settings: Mapping[str, float] | None = None,
             load_segmentation: Callable[[str], object] | None = None,
             load_model: Callable[[str], object] | None = None) -> list[Operation]:
    """Resolve names to values and check every operation; raises MedsegError on the first problem.

    ``load_seeds(path)`` reads a seeds file onto the image grid (value BACKGROUND_SEED for background seeds);
    ``load_segmentation(path)`` a segmentation to merge (a :class:`~medseg.edit.merge.Segmentation` on the
    image grid); ``load_model(reference)`` a model a model-backed operation runs (without it the reference
    is kept as given, and the operation opens it when it runs); ``settings`` are the values of the catalogue's option parameters (``--roi-margin`` …) by name."""
    locked = set(label_map.locked_values())
    created: set[int] = set()  # labels an earlier operation makes
    settings = dict(settings or {})
    for name, value in settings.items():
        for spec in CATALOGUE.values():
            for parameter in spec.parameters:
                if parameter.name == name and parameter.option and parameter.kind == "number":
                    parameter.check(value, parameter.option)
    for op in operations:
        spec = CATALOGUE.get(op.name)
        if spec is None:
            raise MedsegError(f"{op}: unknown operation (known: {', '.join(CATALOGUE)})")
        positional = spec.positional
        if len(op.raw) != len(positional):
            raise MedsegError(f"{op}: needs {len(positional)} value(s)")
        values: dict = {p.name: settings.get(p.name, p.default) for p in spec.parameters if p.option}
        for text, parameter in zip(op.raw, positional):
            kind = parameter.kind
            if parameter.parse is not None:  # a kind a higher layer declared (an interactive prompt)
                try:
                    value = parameter.parse(text, image)
                except MedsegError as error:
                    raise MedsegError(f"{op}: {error.message}", path=error.path, hint=error.hint) from None
            elif kind in ("label", "new-label"):
                value = _label(text, label_map, op, kind == "new-label", created)
            elif kind == "point":
                value = _point(text, op, image)
            elif kind == "points":
                value = _points(text, op, image)
            elif kind == "view":
                value = _view(text, op, label_map)
            elif kind == "choice":
                value = _choice(text, op, parameter)
            elif kind == "seeds-file":
                value = _seeds_file(text, op, label_map, load_seeds)
            elif kind == "polygon-file":
                value = _scissors_file(text, op, label_map, created)
            elif kind == "segmentation-file":
                value = _segmentation_file(text, op, load_segmentation)
            elif kind == "model":
                value = _model(text, op, load_model)
            else:
                value = parameter.check(_number(text, op, label_map, parameter.unit), str(op))
            values[parameter.name] = value
        if spec.check is not None:
            try:
                spec.check(values)
            except MedsegError as error:
                raise MedsegError(f"{op}: {error.message}") from None
        for name in spec.modifies:
            if values[name] in locked:
                raise MedsegError(f"{op}: label {values[name]} is locked by an earlier --lock")
        for parameter in spec.parameters:
            if parameter.kind == "new-label":
                created.add(int(values[parameter.name]))
            elif parameter.kind == "seeds-file":
                created.update(int(v) for v in np.unique(values[parameter.name]) if v and v != BACKGROUND_SEED)
            elif parameter.kind == "segmentation-file":
                created.update(int(v) for v in getattr(values[parameter.name], "labels", {}))
            elif parameter.kind == "model" and hasattr(values[parameter.name], "card"):  # an opened model
                created.update(int(v) for v in values[parameter.name].card.labels)
        locked.update(int(values[name]) for name in spec.locks)
        op.values = values
    return operations


def run_operations(document: SegmentationDocument, operations: list[Operation], rules: PaintRules = PaintRules(),
                   report=None, hu_range: tuple[float, float] | None = None) -> list[tuple[str, int]]:
    """Apply validated operations in order (each through the catalogue, as the GUI does: one undoable,
    journalled step each); returns (operation, voxels changed) for each. ``hu_range``: the range a fill by HU
    fills within (default: the rules' HU mask)."""
    done = []
    context = Context(rules=rules, hu_range=hu_range or rules.hu_range)
    for op in operations:
        spec = CATALOGUE[op.name]
        change = spec.preview(document, op.values, context)
        if document.apply(change.delta, str(op), change.labels):
            for text in change.cautions:  # what the user should read once it is done (the document's notice)
                document.announce(text, "warning")
        done.append((str(op), change.count))
        if report is not None:
            report(str(op), change.count)
    return done
