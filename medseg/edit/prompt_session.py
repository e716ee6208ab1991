"""Prompts that a model turns into an object (a click, a box, a scribble, a lasso), previewed, then applied.

Qt-free and model-free, as the grow-from-seeds session is: the model is behind a
:class:`PromptEngine` that a higher layer gives (``medseg.workflows.interactive``: ``edit`` never
imports ``model``). The GUI thread adds prompts (:meth:`PromptSession.add`); a worker runs
:meth:`PromptSession.compute`, which hands each queued prompt to the engine in order; a prompt added
while one runs cancels the running one (its prompt is dropped, the engine goes back to where it was:
only the newest counts). Every prompt refines the current object; :meth:`new_object` starts another.

What the object does to the label map is the same for the app and ``medseg edit``: over the region
the object has touched, the object's voxels take the label where the paint rules let them (never a
locked label, only background with "only over background", only inside the HU range), and every
other voxel keeps the value it had before the object began, so a negative prompt that takes voxels
out of the object gives them back. :attr:`PromptSession.preview` is that change, not yet written;
:meth:`apply` writes it as one undoable, journalled step; :meth:`cancel` drops it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from medseg.edit.delta import Box, Delta, box_slices, union_box
from medseg.edit.tools.rules import PaintRules, hu_mask, require_label, writable
from medseg.errors import Cancelled, MedsegError
from medseg.progress import CancelToken, Progress, ProgressCallback, report

PROMPT_KINDS = ("point", "box", "scribble", "lasso")
MASK_KINDS = PROMPT_KINDS[2:]  # drawn as a mask (a stroke, a filled outline), not as coordinates
LASSO_PROMPT = PROMPT_KINDS[3]  # a prompt kind (a filled outline), not the Lasso mouse tool of the same name


@dataclass(frozen=True)
class Prompt:
    """One prompt on the image's voxels, (z, y, x) as the image array: a point, a box
    ((z0, z1), (y0, y1), (x0, x1)), half-open, one voxel deep along the axis it was drawn on),
    or a scribble/lasso mask (nonzero = drawn) whose first voxel is at ``origin``."""

    kind: str
    positive: bool = True
    point: tuple[float, float, float] | None = None
    box: tuple[tuple[int, int], ...] | None = None
    mask: np.ndarray | None = None
    origin: tuple[int, int, int] = (0, 0, 0)

    def __post_init__(self) -> None:
        if self.kind not in PROMPT_KINDS:
            raise MedsegError(f"a prompt is one of {', '.join(PROMPT_KINDS)}, not {self.kind!r}")
        needed = {"point": self.point, "box": self.box}.get(self.kind, self.mask)
        if needed is None:
            raise MedsegError(f"a {self.kind} prompt needs its {'mask' if self.kind in MASK_KINDS else self.kind}")

    def describe(self) -> str:
        sign = "" if self.positive else "negative "
        return f"{sign}{self.kind}"

    def extent(self) -> tuple[int, int, int]:
        """Its size in voxels along (z, y, x) (a point's is 1)."""
        if self.kind == "point":
            return (1, 1, 1)
        if self.kind == "box":
            return tuple(max(1, int(hi) - int(lo)) for lo, hi in self.box)  # type: ignore[return-value, union-attr]
        painted = np.asarray(self.mask) != 0
        hits = [np.flatnonzero(painted.any(axis=tuple(a for a in range(3) if a != axis))) for axis in range(3)]
        return tuple(int(h[-1] - h[0] + 1) if h.size else 1 for h in hits)  # type: ignore[return-value]


class PromptEngine(Protocol):
    """The model behind the prompts (given by a higher layer). ``mask``: the current object, uint8 over the
    image's (z, y, x) grid. ``add`` runs one prompt and returns the box it rewrote (None: nothing); it raises
    :class:`~medseg.errors.Cancelled` when ``cancel`` is set mid-way, and then leaves ``mask`` as it was. It
    reports its steps (a model's network passes) to ``progress`` as they start and end."""

    mask: np.ndarray

    def add(self, prompt: Prompt, cancel: CancelToken | None = None,
            progress: ProgressCallback | None = None) -> Box | None: ...

    def new_object(self) -> None: ...


@dataclass
class PromptPreview:
    """What Apply would write: over ``box``, the label map's values after it (``labels``), and the ``delta``
    from the label map as it is now (None: nothing would change)."""

    box: Box
    labels: np.ndarray
    delta: Delta | None
    generation: int


class PromptSession:
    """The current object of ``label`` on ``document``, made by ``engine`` from the prompts added."""

    def __init__(self, document, engine: PromptEngine | Callable[[], PromptEngine], label: int,
                 rules: PaintRules = PaintRules()):
        if document.volume is None:
            raise MedsegError("open an image before prompting")
        self.document = document
        self.label_map = document.new_label_map()
        require_label(self.label_map, int(label))
        self.label = int(label)
        self.rules = rules
        self._engine_source = engine
        self._engine: PromptEngine | None = None
        self._lock = threading.Lock()
        self._queue: list[Prompt] = []
        self._running: CancelToken | None = None
        self.prompts: list[Prompt] = []  # the prompts the current object was made from, in order
        self.dropped = 0  # prompts cancelled by a newer one
        self._region: Box | None = None  # where the object has been: the label map's values before it, over it
        self._before: np.ndarray | None = None
        self._generation = 0
        self._fresh = True  # the engine forgets any earlier object before this session's first prompt
        self.preview: PromptPreview | None = None
        self.running: Prompt | None = None  # the prompt the engine runs now
        # told, on the thread that computes, what the engine is doing ("box: pass 2 of 3: …"); set by the interface
        self.progress: ProgressCallback | None = None

    # --- the GUI thread ------------------------------------------------------------------------
    def add(self, prompt: Prompt) -> None:
        """Queue a prompt; a prompt the engine is running now is cancelled (the newest counts)."""
        with self._lock:
            self._queue.append(prompt)
            if self._running is not None:
                self._running.cancel()

    def pending(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def drawn_prompts(self) -> list[Prompt]:
        """Every prompt of the current object as the user drew them: the ones the object was made from, the
        one running and the queued ones (the views draw them until the object is applied or dropped)."""
        with self._lock:
            running = [self.running] if self.running is not None else []
            return [*self.prompts, *running, *self._queue]

    def cancel_running(self) -> None:
        """Stop the prompt the engine runs now and drop the queued ones (Cancel, the window closing)."""
        with self._lock:
            self._queue.clear()
            if self._running is not None:
                self._running.cancel()

    # --- the heavy part (a worker thread) ------------------------------------------------------
    def compute(self) -> PromptPreview | None:
        """Run the queued prompts in order (each cancelled one dropped), then make the preview."""
        while True:
            with self._lock:
                if not self._queue:
                    break
                prompt = self._queue.pop(0)
                token = self._running = CancelToken()
                self.running = prompt
                if self._queue:  # a newer prompt waits: this one is already superseded
                    token.cancel()
            done = False
            try:
                if self._engine is None:  # the first prompt may load the model: say so, it can take a while
                    report(self.progress, 0.0, f"prompt {len(self.prompts) + 1} ({prompt.describe()}): preparing the "
                                               "model…", "load")
                engine = self.engine()
                if self._fresh:  # in the worker: the engine is never touched from two threads
                    engine.new_object()
                    self._fresh = False
                changed = engine.add(prompt, token, self._progress_of(prompt))
                done = True
            except Cancelled:
                self.dropped += 1
                continue
            finally:
                with self._lock:
                    self._running = None
                    self.running = None
                    if done:  # in the same step as running: the views never miss it, nor draw it twice
                        self.prompts.append(prompt)
            if changed is not None:
                self._grow_region(changed)
        return self._make_preview()

    def _progress_of(self, prompt: Prompt) -> ProgressCallback | None:
        """The engine's steps, told with the prompt they belong to ("prompt 2 (negative box), pass 2 of 3: …")."""
        progress = self.progress
        if progress is None:
            return None
        number = len(self.prompts) + 1
        return lambda step: progress(Progress(step.fraction, f"prompt {number} ({prompt.describe()}), {step.text}",
                                              step.stage))

    @property
    def started_engine(self) -> PromptEngine | None:
        """The engine once the first prompt made it (None before: making it loads the model)."""
        return self._engine

    def engine(self) -> PromptEngine:
        if self._engine is None:
            source = self._engine_source
            self._engine = source() if callable(source) and not hasattr(source, "add") else source  # type: ignore[assignment]
        return self._engine  # type: ignore[return-value]

    def _grow_region(self, changed: Box) -> None:
        """Keep the label map's values before the object over every box the object has touched."""
        shape = self.label_map.shape_zyx
        changed = (tuple(max(0, int(a)) for a in changed[0]), tuple(min(n, int(b)) for b, n in zip(changed[1], shape)))
        if any(b <= a for a, b in zip(*changed)):
            return
        region = changed if self._region is None else union_box(self._region, changed)  # type: ignore[arg-type]
        if region == self._region:
            return
        # outside the old region the label map is still as it was before the object: read it there
        before = self.label_map.array[box_slices(region)].copy()
        if self._region is not None and self._before is not None:
            inner = tuple(slice(a - r, b - r) for a, b, r in zip(self._region[0], self._region[1], region[0]))
            before[inner] = self._before
        self._region, self._before = region, before  # type: ignore[assignment]

    def _make_preview(self) -> PromptPreview | None:
        if self._region is None or self._before is None:
            self.preview = None
            return None
        sl = box_slices(self._region)
        before = self._before
        target = self.target(sl, before)
        now = self.label_map.array[sl]
        delta = Delta.from_blocks(self._region[0], now, target.astype(now.dtype, copy=False)) \
            if np.can_cast(target.dtype, now.dtype) else Delta.from_blocks(self._region[0], now.astype(target.dtype), target)
        self._generation += 1
        self.preview = PromptPreview(self._region, np.minimum(target, 255).astype(np.uint8), delta, self._generation)
        return self.preview

    def target(self, sl: tuple[slice, ...], before: np.ndarray) -> np.ndarray:
        """The values the region takes: the object's voxels the label where allowed, the rest as before."""
        inside = self.engine().mask[sl] != 0 if not self._fresh else np.zeros(before.shape, bool)
        for limit in (writable(self.label_map, before, self.rules, self.label), hu_mask(self.document.volume, sl, self.rules)):
            if limit is not None:
                inside &= limit
        dtype = np.promote_types(before.dtype, np.min_scalar_type(self.label))
        target = before.astype(dtype, copy=True)
        target[inside] = self.label
        return target

    # --- ending ----------------------------------------------------------------------------------
    def apply(self, description: str | None = None) -> bool:
        """Write the preview as one undoable step (running queued prompts first) and start a new object."""
        if self.pending() or self.preview is None:
            self.compute()
        preview = self._make_preview()  # against the label map as it is now
        entry = self.label_map.labels.get(self.label)
        name = entry.name if entry else f"label {self.label}"
        kinds = ", ".join(p.describe() for p in self.prompts) or "no prompt"
        changed = preview is not None and self.document.apply(
            preview.delta, description or f"interactive {name}", announce=f"Interactive AI ({kinds}) on {name}")
        self.new_object()
        return changed

    def new_object(self) -> None:
        """Forget the prompts and the object: the next prompt starts a new object."""
        self.cancel_running()
        self._fresh = True  # the engine is reset by the next compute, on the thread that runs it
        self.prompts = []
        self._region = self._before = None
        self.preview = None

    def cancel(self) -> None:
        """Drop everything; the label map stays as it is."""
        self.new_object()


def prompt_from_outline(kind: str, points_zyx: Sequence[Sequence[float]], plane_axis: int, shape_zyx: Sequence[int],
                        positive: bool = True) -> Prompt | None:
    """A box, scribble or lasso prompt from points drawn on one slice (continuous voxels (z, y, x)); None when
    it has no extent inside the image."""
    points = np.asarray(points_zyx, dtype=float)
    if not len(points):
        return None
    depth = int(round(points[0][plane_axis]))
    if not 0 <= depth < shape_zyx[plane_axis]:
        return None
    axes = [a for a in range(3) if a != plane_axis]
    if kind == "box":
        box = []
        for axis in range(3):
            if axis == plane_axis:
                box.append((depth, depth + 1))
                continue
            lo, hi = sorted((int(round(points[:, axis].min())), int(round(points[:, axis].max()))))
            lo, hi = max(0, lo), min(int(shape_zyx[axis]), hi + 1)
            if hi <= lo:
                return None
            box.append((lo, hi))
        if any(hi - lo < 2 for axis, (lo, hi) in enumerate(box) if axis != plane_axis):
            return None
        return Prompt("box", positive, box=tuple(box))
    plane_shape = [int(shape_zyx[a]) for a in axes]
    plane = np.zeros(plane_shape, dtype=bool)
    rows, cols = points[:, axes[0]], points[:, axes[1]]
    if kind != "scribble":  # a lasso: the outline filled
        if len(points) < 3:
            return None
        from skimage.draw import polygon

        rr, cc = polygon(rows, cols, shape=plane_shape)
        plane[rr, cc] = True
    elif kind == "scribble":
        from skimage.draw import line

        ints = np.rint(np.stack([rows, cols], axis=1)).astype(int)
        for (r0, c0), (r1, c1) in zip(ints, ints[1:] if len(ints) > 1 else ints):
            rr, cc = line(r0, c0, r1, c1)
            keep = (rr >= 0) & (rr < plane_shape[0]) & (cc >= 0) & (cc < plane_shape[1])
            plane[rr[keep], cc[keep]] = True
    else:
        raise MedsegError(f"a {kind} prompt is not drawn as an outline")
    if not plane.any():
        return None
    hits = [np.flatnonzero(plane.any(axis=1 - a)) for a in range(2)]
    lo2 = [int(h[0]) for h in hits]
    hi2 = [int(h[-1]) + 1 for h in hits]
    crop = plane[lo2[0]:hi2[0], lo2[1]:hi2[1]]
    mask = np.expand_dims(crop.astype(np.uint8), plane_axis)
    origin = [0, 0, 0]
    origin[plane_axis] = depth
    origin[axes[0]], origin[axes[1]] = lo2
    return Prompt(kind, positive, mask=mask, origin=tuple(origin))  # type: ignore[arg-type]


__all__ = ["PROMPT_KINDS", "Prompt", "PromptEngine", "PromptPreview", "PromptSession", "prompt_from_outline"]
