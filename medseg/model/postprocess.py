"""Model-declared post-processing: what a package says to do with its network's label map.

nnU-Net v2 decides per label, on its validation folds, whether keeping only the largest
connected component helps, and applies that after every prediction. A medseg package lists
its steps in ``model.json`` under ``"postprocessing"`` in the same spirit: steps from a closed
set of operations (data, never code: model files are not programs), naming labels by name,
checked against the package's labels when it is loaded, applied by ``segment`` on the
series' own grid and reported in millilitres, so a user sees what changed and can turn it
off (``medseg segment --no-postprocess``).

The operations (``"op"``):

``keep_inside``  {"op": "keep_inside", "label": "lungs", "inside": ["body", "bones"]}
    Voxels of ``label`` outside the patient's silhouette become ``"otherwise"`` (default
    background). The silhouette is the union of the ``inside`` labels in each axial slice
    with its holes filled: lung enclosed by the chest wall is
    inside, air next to the body (a head-rest cushion, between arm and chest) is not.
``remove_small_components``  {"op": ..., "label": "lungs", "min_ml": 10, "otherwise": "body"}
    3D connected components (face connectivity) of ``label`` smaller than ``min_ml`` become
    ``otherwise`` (default background).
``remove_components_in_slices_of``  {"op": ..., "label": "lungs", "of": ["bones"], "max_share": 0.17,
"otherwise": "body"}
    3D components of ``label`` whose slices are, at the median over the slices each spans, more
    than ``max_share`` made of the ``of`` labels (a share of the slice's foreground) become
    ``otherwise`` (default background): the air of the nose and sinuses lies in skull-base
    slices that are mostly bone, the lungs in slices that are a few per cent bone.
``keep_largest_component``  {"op": "keep_largest_component", "labels": ["liver"]}
    nnU-Net v2's ``remove_all_but_largest_component_from_segmentation``: of the union of
    ``labels``, only the largest 3D component (full 26-connectivity, as nnU-Net labels them;
    components tied for largest all stay) is kept, the rest becomes background. An nnU-Net
    result folder's ``postprocessing.json`` imports as these steps.
``fill_holes``  {"op": "fill_holes"}
    Background enclosed by foreground within an axial slice takes the label around it (the
    most common label on the hole's edge): a brain the network left unlabelled inside the
    skull becomes body, a patch of lung it missed inside the lung becomes lung.

The starter model's steps restate its rule labels' own definition (``rule_labels``: lungs are
components of at least 10 ml inside the filled body, in slices at most 17 % bone; body and
lungs have their holes filled per slice), so they add no knowledge its training targets lacked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import ndimage

from medseg.errors import ModelError

IN_PLANE_4 = np.zeros((3, 3, 3), dtype=bool)  # 4-connectivity within a slice, none across slices
IN_PLANE_4[1] = ndimage.generate_binary_structure(2, 1)

_SLICES_PER_CHUNK = 16
OPERATIONS = ("keep_inside", "remove_small_components", "remove_components_in_slices_of", "keep_largest_component",
              "fill_holes")
_KEYS = {
    "keep_inside": {"op", "label", "inside", "otherwise"},
    "remove_small_components": {"op", "label", "min_ml", "otherwise"},
    "remove_components_in_slices_of": {"op", "label", "of", "max_share", "otherwise"},
    "keep_largest_component": {"op", "labels"},
    "fill_holes": {"op"},
}


@dataclass(frozen=True)
class PostprocessStep:
    """One validated step; labels are values of the package's label table."""

    op: str
    label: int
    others: tuple[int, ...] = ()  # keep_inside's "inside", ..._in_slices_of's "of", keep_largest's "labels"
    min_ml: float = 0.0
    max_share: float = 1.0
    otherwise: int = 0

    def describe(self, names: Mapping[int, str]) -> str:
        if self.op == "keep_inside":
            around = " and ".join(names[v] for v in self.others)
            return f"{names[self.label]} only inside the silhouette of {around} (filled per slice); else {names[self.otherwise]}"
        if self.op == "remove_small_components":
            return f"{names[self.label]} pieces under {self.min_ml:g} ml become {names[self.otherwise]}"
        if self.op == "remove_components_in_slices_of":
            of = " and ".join(names[v] for v in self.others)
            return (f"{names[self.label]} pieces in slices over {100 * self.max_share:g} % {of} (median) "
                    f"become {names[self.otherwise]}")
        if self.op == "keep_largest_component":
            return f"only the largest piece of {' and '.join(names[v] for v in self.others)} is kept"
        return "background enclosed within a slice takes the label around it"


@dataclass(frozen=True)
class StepOutcome:
    """What one step changed in one run."""

    step: PostprocessStep
    changed_ml: float

    def describe(self, names: Mapping[int, str]) -> str:
        return f"{self.step.describe(names)}: {self.changed_ml:.1f} ml changed"


def bounding_box(mask: np.ndarray, margin: int = 0) -> tuple[slice, ...] | None:
    """The smallest box holding every set voxel, grown by ``margin`` voxels (None: an empty mask).

    Post-processing a 512 x 512 x 300 series touches a few objects; working on their box
    instead of the whole volume makes the steps several times faster.
    """
    box = []
    for axis in range(mask.ndim):
        hit = np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != axis)))
        if hit.size == 0:
            return None
        box.append(slice(max(0, int(hit[0]) - margin), min(mask.shape[axis], int(hit[-1]) + 1 + margin)))
    return tuple(box)


def fill_holes_per_slice(mask: np.ndarray) -> np.ndarray:
    """2D hole filling of every axial slice: background not reachable from the slice's edge.

    Labelling the background once with in-plane connectivity is much faster than
    calling ``binary_fill_holes`` slice by slice; outside the mask's in-plane bounding box
    (plus one voxel) everything is reachable, so only the box is labelled.
    """
    box = bounding_box(mask, margin=1)
    filled = mask.copy()
    if box is None:
        return filled
    # slices are independent: a few at a time keeps the int32 labels small (a 512 x 512 x 300
    # series would need 300 MB for them at once)
    for start in range(box[0].start, box[0].stop, _SLICES_PER_CHUNK):
        chunk = (slice(start, min(start + _SLICES_PER_CHUNK, box[0].stop)), *box[1:])
        background, _ = ndimage.label(~mask[chunk], structure=IN_PLANE_4)
        edge = np.concatenate([background[:, 0, :], background[:, -1, :], background[:, :, 0],
                               background[:, :, -1]], axis=1)
        outside = np.zeros(int(background.max()) + 1, dtype=bool)
        outside[np.unique(edge)] = True
        outside[0] = False  # label 0 is the mask itself
        # a box edge that is the slice's own edge is the slice's edge; one inside the slice
        # has background beyond it (the margin), so the same rule holds either way
        filled[chunk] |= ~outside[background] & (background > 0)
    return filled


def parse_steps(raw: Any, labels: Mapping[int, str], where: Any = None) -> list[PostprocessStep]:
    """Validate a manifest's ``"postprocessing"`` list; ModelError names the step and the problem."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ModelError(f"postprocessing must be a list of steps, not {type(raw).__name__}", path=where)
    by_name = {name: value for value, name in labels.items()}
    steps = []
    for index, entry in enumerate(raw, start=1):
        what = f"postprocessing step {index}"
        if not isinstance(entry, dict) or entry.get("op") not in OPERATIONS:
            op = entry.get("op") if isinstance(entry, dict) else entry
            raise ModelError(f"{what}: unknown operation {op!r} (known: {', '.join(OPERATIONS)})", path=where,
                             hint="this model may need a newer medseg")
        op = entry["op"]
        unknown = set(entry) - _KEYS[op]
        if unknown:
            raise ModelError(f"{what} ({op}): unknown keys {sorted(unknown)}", path=where)

        def label(key: str, default: str | None = None) -> int:
            name = entry.get(key, default)
            if name not in by_name:
                raise ModelError(f"{what} ({op}): {key} {name!r} is not one of the model's labels "
                                 f"{sorted(by_name)}", path=where)
            return by_name[name]

        def label_list(key: str) -> tuple[int, ...]:
            names = entry.get(key)
            if not isinstance(names, list) or not names:
                raise ModelError(f"{what} ({op}): {key} must list at least one label", path=where)
            for name in names:
                if name not in by_name or by_name[name] == 0:
                    raise ModelError(f"{what} ({op}): {key} names {name!r}, not a foreground label", path=where)
            return tuple(by_name[name] for name in names)

        if op in ("fill_holes", "keep_largest_component"):
            steps.append(PostprocessStep(op, 0, others=label_list("labels") if op != "fill_holes" else ()))
            continue
        target = label("label")
        if target == 0:
            raise ModelError(f"{what} ({op}): label must be a foreground label, not background", path=where)
        if op == "keep_inside":
            steps.append(PostprocessStep(op, target, others=label_list("inside"),
                                         otherwise=label("otherwise", labels[0])))
        elif op == "remove_components_in_slices_of":
            share = entry.get("max_share")
            if not isinstance(share, (int, float)) or isinstance(share, bool) or not 0 < share < 1:
                raise ModelError(f"{what} ({op}): max_share must be a fraction between 0 and 1, not {share!r}",
                                 path=where)
            steps.append(PostprocessStep(op, target, others=label_list("of"), max_share=float(share),
                                         otherwise=label("otherwise", labels[0])))
        elif op == "remove_small_components":
            min_ml = entry.get("min_ml")
            if not isinstance(min_ml, (int, float)) or isinstance(min_ml, bool) or not min_ml > 0:
                raise ModelError(f"{what} (remove_small_components): min_ml must be a positive number, "
                                 f"not {min_ml!r}", path=where)
            steps.append(PostprocessStep(op, target, min_ml=float(min_ml), otherwise=label("otherwise", labels[0])))
    return steps


def _fill_from_surroundings(label_map: np.ndarray) -> np.ndarray:
    """Give each enclosed background hole (per slice) the most common label on its edge; the holes."""
    holes = fill_holes_per_slice(label_map != 0) & (label_map == 0)
    box = bounding_box(holes, margin=1)
    if box is None:
        return holes
    crop, labels = holes[box], label_map[box]
    components, count = ndimage.label(crop, structure=IN_PLANE_4)
    # the edge: voxels next to a hole within its slice, each tagged with that hole's number
    edge = ndimage.binary_dilation(crop, structure=IN_PLANE_4) & ~crop
    owner = ndimage.maximum_filter(components, footprint=IN_PLANE_4)[edge]
    votes = np.zeros((count + 1, int(label_map.max()) + 1), np.int64)
    np.add.at(votes, (owner, labels[edge]), 1)
    votes[:, 0] = -1  # an enclosed hole's edge is foreground; background never wins
    labels[crop] = votes.argmax(axis=1)[components[crop]].astype(label_map.dtype)
    return holes


def _pieces_where(mask: np.ndarray, condemned: Callable[[np.ndarray, np.ndarray, tuple[slice, ...]], Any],
                  structure: np.ndarray | None = None) -> np.ndarray:
    """The voxels of ``mask`` in 3D components that ``condemned(components, sizes, box)`` marks.

    ``components`` is labelled within the mask's bounding box ``box``; ``condemned`` returns one
    verdict per component number (number 0, the background, is never changed).
    """
    changed = np.zeros(mask.shape, bool)
    box = bounding_box(mask)
    if box is None:
        return changed
    components, _ = ndimage.label(mask[box], structure=structure)
    verdicts = np.asarray(condemned(components, np.bincount(components.ravel()), box), bool)
    verdicts[0] = False
    changed[box] = verdicts[components]
    return changed


def _in_slices_of(label_map: np.ndarray, step: PostprocessStep) -> np.ndarray:
    """The components of ``step.label`` whose slices are, at the median, over ``max_share`` ``of``."""
    share = (np.isin(label_map, step.others).sum(axis=(1, 2))
             / np.maximum((label_map != 0).sum(axis=(1, 2)), 1))

    def condemned(components: np.ndarray, _sizes: np.ndarray, box: tuple[slice, ...]) -> list[bool]:
        z0 = box[0].start
        return [False] + [piece is not None and float(np.median(share[z0 + piece[0].start:z0 + piece[0].stop]))
                          > step.max_share for piece in ndimage.find_objects(components)]

    return _pieces_where(label_map == step.label, condemned)


def apply_steps(label_map: np.ndarray, steps: Sequence[PostprocessStep], voxel_ml: float) -> list[StepOutcome]:
    """Apply ``steps`` in order to ``label_map`` (z, y, x; changed in place); what each changed."""
    outcomes = []
    for step in steps:
        if step.op == "keep_inside":
            # the silhouette leaves the label itself out: a rim of "lung" around the body would
            # otherwise enclose the body and count itself as inside
            changed = (label_map == step.label) & ~fill_holes_per_slice(np.isin(label_map, step.others))
        elif step.op == "remove_small_components":
            changed = _pieces_where(label_map == step.label, lambda _c, sizes, _b: sizes * voxel_ml < step.min_ml)
        elif step.op == "remove_components_in_slices_of":
            changed = _in_slices_of(label_map, step)
        elif step.op == "keep_largest_component":
            # full 26-connectivity: nnU-Net labels components so (skimage's default)
            changed = _pieces_where(np.isin(label_map, step.others), lambda _c, sizes, _b: sizes != sizes[1:].max(),
                                    structure=np.ones((3, 3, 3), bool))
        else:
            changed = _fill_from_surroundings(label_map)
        if step.op != "fill_holes":
            label_map[changed] = step.otherwise
        outcomes.append(StepOutcome(step, float(np.count_nonzero(changed)) * voxel_ml))
    return outcomes
