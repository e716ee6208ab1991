"""A grow-from-seeds session: seeds painted with the mouse, a live preview, Apply or Cancel.

Qt-free, so tests drive it without a window and the GUI runs its one heavy method,
:meth:`GrowSession.compute`, in a worker thread. The painting side (``paint``, on the GUI
thread) only records strokes into the seed layer and a queue; ``compute`` takes every
queued stroke at once, updates the :class:`~medseg.edit.tools.grow_seeds.SeedGrower`
incrementally (a new region of interest, grown from scratch, only when a stroke falls
outside the current one or a parameter changed) and returns the preview: a Delta not yet
applied, plus the label block it would write. :meth:`GrowSession.apply` hands that Delta to
the document as one undoable step; :meth:`cancel` drops everything, the label map untouched.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from medseg.edit.delta import Box, Delta, box_of, box_slices, union_box
from medseg.edit.tools.brush import ball_mask, path_points
from medseg.edit.tools.grow_seeds import BACKGROUND_SEED, GrowParameters, SeedGrower, roi_box
from medseg.edit.tools.rules import PaintRules
from medseg.errors import MedsegError

SEED_BACKGROUND = 255  # the seed layer's code for background seeds (label values are 1…254 there)


@dataclass
class GrowPreview:
    """What Apply would write: ``delta`` (None when nothing would change) and, over ``box``, the labels after it."""

    box: Box
    labels: np.ndarray  # uint8 block of the label map's values after the change
    delta: Delta | None
    generation: int  # bumped by every compute: a stale preview can be told apart


class GrowSession:
    def __init__(self, document, parameters: GrowParameters = GrowParameters(), rules: PaintRules = PaintRules()):
        if document.volume is None:
            raise MedsegError("open an image before growing from seeds")
        self.document = document
        self.label_map = document.new_label_map()
        self.parameters, self.rules = parameters, rules
        self.seeds = np.zeros(self.label_map.shape_zyx, dtype=np.uint8)  # the seed layer the views draw
        self.seed_box: Box | None = None
        self._queue: list[tuple[tuple[int, int, int], np.ndarray, int | None]] = []  # (corner, mask, value | None)
        self._lock = threading.Lock()
        self._grower: SeedGrower | None = None
        self._generation = 0
        self.preview: GrowPreview | None = None

    # --- painting (GUI thread) ---------------------------------------------------------------
    def paint(self, points_zyx: Sequence[Sequence[float]], radius_mm: float, value: int | None,
              plane_axis: int | None = None) -> Box | None:
        """Seeds of label ``value`` (BACKGROUND_SEED for background; None erases seeds) along a stroke.
        Returns the box of the seed layer that changed (for the views), or None."""
        if value is not None and value != BACKGROUND_SEED and not 1 <= int(value) < SEED_BACKGROUND:
            raise MedsegError(f"seeds can be painted for labels 1…{SEED_BACKGROUND - 1}, not {value}")
        path = path_points(points_zyx, radius_mm, self.label_map.spacing_zyx)
        found = ball_mask(path, radius_mm, self.label_map.spacing_zyx, self.label_map.shape_zyx, plane_axis)
        if found is None:
            return None
        lo, mask = found
        box = (lo, tuple(a + n for a, n in zip(lo, mask.shape)))
        block = self.seeds[box_slices(box)]
        code = 0 if value is None else (SEED_BACKGROUND if value == BACKGROUND_SEED else int(value))
        if not (mask & (block != code)).any():
            return None
        block[mask] = code
        with self._lock:
            self._queue.append((lo, mask, None if value is None else int(value)))
        # a box that holds every seed (erasing never shrinks it): the views only look at seeds inside it
        self.seed_box = box if self.seed_box is None else union_box(self.seed_box, box)  # type: ignore[assignment]
        return box  # type: ignore[return-value]

    def set_seed_volume(self, seeds: np.ndarray) -> None:
        """Seeds from a volume on the image grid (0: none, a label value, BACKGROUND_SEED), replacing the seed
        layer (e.g. a seeds file, or seeds placed by a script); the next compute grows from scratch."""
        if tuple(seeds.shape) != self.label_map.shape_zyx:
            raise MedsegError(f"the seeds' grid {tuple(seeds.shape[::-1])} (x, y, z) does not match the image's "
                              f"{self.label_map.size_xyz}")
        values = [int(v) for v in np.unique(seeds) if v and v != BACKGROUND_SEED]
        if any(not 1 <= v < SEED_BACKGROUND for v in values):
            raise MedsegError(f"seeds can be painted for labels 1…{SEED_BACKGROUND - 1}")
        self.seeds[...] = np.where(seeds == BACKGROUND_SEED, SEED_BACKGROUND, seeds).astype(np.uint8)
        with self._lock:
            self._queue.clear()
            self._grower = None
        self.seed_box = box_of(self.seeds != 0)

    def set_parameters(self, parameters: GrowParameters) -> None:
        """New parameters: the next compute grows from scratch."""
        with self._lock:
            self.parameters = parameters
            self._grower = None

    def pending(self) -> bool:
        with self._lock:
            return bool(self._queue) or (self._grower is None and self.seed_box is not None)

    # --- the heavy part (a worker thread) ----------------------------------------------------
    def compute(self) -> GrowPreview | None:
        """Take the queued strokes, update the growth, and return the new preview (None: no seeds)."""
        with self._lock:
            strokes, self._queue = self._queue, []
            grower, parameters = self._grower, self.parameters
        seed_box = None if self.seed_box is None else _shifted(box_of(self.seeds[box_slices(self.seed_box)] != 0),
                                                                self.seed_box[0])
        if seed_box is None:
            with self._lock:
                self._grower = None
            self.preview = None
            return None
        inside = grower is not None and all(_inside(lo, mask.shape, grower.box) for lo, mask, _ in strokes)
        if grower is None or not inside:
            box = roi_box(seed_box, parameters.roi_margin_mm, self.label_map.spacing_zyx, self.label_map.shape_zyx)
            if grower is not None:
                box = union_box(box, grower.box)  # never shrinks while painting: the region only grows
            grower = SeedGrower(self.document.volume, self.label_map, box, parameters)
            block = self.seeds[box_slices(box)]
            for code in (int(v) for v in np.unique(block) if v):
                value = BACKGROUND_SEED if code == SEED_BACKGROUND else code
                grower.seeds[(block == code) & ~grower.locked] = grower.class_for(value)
            grower.regrow()
        else:
            for lo, mask, value in strokes:
                if value is None:
                    grower.erase_seeds(lo, mask)
                else:
                    grower.add_seeds(lo, mask, value)
        with self._lock:
            if self.parameters == parameters:
                self._grower = grower
        after, delta = grower.preview(self.rules)
        if after is None:
            labels = self.label_map.array[box_slices(grower.box)].astype(np.uint8, copy=True)
        else:
            labels = np.minimum(after, 255).astype(np.uint8, copy=False)  # the views draw values 0…255
        self._generation += 1
        self.preview = GrowPreview(grower.box, labels, delta, self._generation)
        return self.preview

    # --- ending -----------------------------------------------------------------------------------
    def apply(self, description: str = "grow from seeds") -> bool:
        """Write the preview as one undoable step (computing it first if strokes are pending)."""
        if self.pending() or self.preview is None:
            self.compute()
        preview = self.preview
        changed = preview is not None and self.document.apply(preview.delta, description, announce="Grow from seeds")
        self.clear()
        return changed

    def cancel(self) -> None:
        self.clear()

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._grower = None
        self.seeds[...] = 0
        self.seed_box = None
        self.preview = None


def _shifted(box: Box | None, by) -> Box | None:
    if box is None:
        return None
    return (tuple(a + o for a, o in zip(box[0], by)), tuple(b + o for b, o in zip(box[1], by)))  # type: ignore[return-value]


def _inside(lo, shape, box: Box) -> bool:
    return all(b0 <= a and a + n <= b1 for a, n, b0, b1 in zip(lo, shape, box[0], box[1]))


__all__ = ["GrowSession", "GrowPreview", "SEED_BACKGROUND"]
