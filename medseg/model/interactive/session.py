"""One image, one object, refined prompt after prompt: medseg's interactive segmentation session.

It computes what nnInteractive 2.6.0's ``nnInteractiveInferenceSession`` computes on the same
checkpoint (tests/model/test_interactive_parity.py runs both), in this order for each prompt:

1. **Draw the prompt** into its channel pair (positive or negative) at the current intensity
   (:mod:`.prompts`), and take the prompt's centre and first zoom factor: 1 for a point; for a
   box, scribble or lasso ``max(1, (extent + patch // 3) / patch)`` over the axes, at most 4.
2. **Network input** (:mod:`.resize`): a cube of ``round(patch * zoom)`` voxels centred on the
   prompt, zeros outside the image; the image normalised with the whole image's statistics; the
   prompt channels divided by the intensity; channel 0 of the prompts the current answer. At a
   zoom above 1 the cube is resized to the patch.
3. **Forward pass and argmax** (ties go to the background), on the CPU in float32 with PyTorch unless
   the model's measured runtime choice says otherwise (:mod:`.runtimes`).
4. **Zoom out** while the answer changed at the patch's faces (:func:`.refine_boxes.changed_at_border`):
   zoom x 1.5 (at most 4), back to 2.
5. At zoom 1 the answer replaces the current object over the whole cube. Zoomed out, the coarse
   answer is upsampled (trilinear, >= 0.5), the voxels where it changes the object are covered
   with full-resolution patches (:func:`.refine_boxes.cover_boxes`), each patch is run with the
   coarse answer (and the patches before it) as its previous answer, and only those patches are
   written into the object.

Where it differs from nnInteractive, nothing in the result does: the image is not copied and
normalised whole (each crop is normalised as it is cut), the prompt channels are kept as the
stamps that made them (not 7 image-size float16 volumes), the refinement builds each patch
from those sources (not from a cache of all channels over all patches), prompt channels with
nothing in a zoomed crop are not resized, and the network runs with oneDNN convolutions and
medseg's lean forward (:mod:`medseg.model.lean_forward`), which agree with the module
forward to float rounding. nnInteractive leaves one thing to chance: voxels the grid of
refinement patches misses are covered from random voxels drawn from NumPy's unseeded global
generator; here from a generator seeded with ``seed`` at every prompt, so a prompt sequence
always gives the same object.

**Small first patch** (``small_first=True``; off by default, and not nnInteractive's result): a prompt
that would run at zoom 1 and whose extent, and the object so far, fit inside a cube of half the patch
(:func:`small_patch_for`: 96^3 for the 192^3 patch, an eighth of the convolutions) runs there first. If
its answer differs from the previous one anywhere on that cube's faces (stricter than the zoom-out's
thresholds: a kept small answer must not cut an object the full patch would have seen whole), the
prompt falls back to the exact path above, unchanged (a large object costs the small pass and the
full one); otherwise the small answer replaces the object over the small cube and the prompt ends.
The network's instance norms see the smaller cube's statistics, so the kept answer can differ from
the full patch's inside it: ``benchmarks/bench_interactive_small_first.py`` measures by how much.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from medseg import threads as medseg_threads
from medseg.errors import MedsegError
from medseg.model.backends import TorchRunner, resolve_device
from medseg.model.interactive.cost import PromptCost, duration_text, first_zoom, prompt_cost
from medseg.model.interactive.model_files import InteractiveModel
from medseg.model.interactive.patch_geometry import box_slices, crop_of, edges, on_faces, small_patch_for
from medseg.model.interactive.prompt_outcome import EXACT, SMALL, SMALL_THEN_EXACT, PromptError, PromptResult, Undo
from medseg.model.interactive.prompts import Box, PromptStore
from medseg.model.interactive.refine_boxes import changed_at_border, changed_region, cover_boxes
from medseg.model.interactive.resize import (
    NormalisedImage,
    area_resize,
    centred_box,
    clip_box,
    dilate,
    local,
    nearest_resize,
    round_to_odd,
    trilinear_resize,
    union_box,
)
from medseg.model.interactive.runtimes import calibrated_pass, takes_cancel
from medseg.model.lean_forward import cancellable, slab_budget
from medseg.progress import CancelToken, ProgressCallback, report

MAX_ZOOM = 4.0
ZOOM_GROWTH = 1.5
# The lean forward's slab: on the 192^3 patch 128 MiB slabs (about 27 rows of the 32-channel stages)
# cost about 5 % over the module forward's time, 16 MiB ones about 20 % (measured at 128^3, 2 threads);
# the activations held stay far below the module forward's either way.
SLAB_BYTES = 128 * 2**20
CALIBRATED, LAST_PASS = "as measured when the model was installed", "as the last pass took"  # a pass's seconds


Runner = Callable[[torch.Tensor], torch.Tensor]


class InteractiveSession:
    """Prompts on one image; :attr:`mask` is the current object (uint8, the image's (z, y, x) shape)."""

    def __init__(self, model: InteractiveModel, device: str = "auto", *, runner: Runner | None = None,
                 seed: int = 0, autozoom: bool = True, runtime: str = "auto", small_first: bool = False):
        """``runtime`` (on the CPU): auto (the model folder's measured choice, see :mod:`.runtimes`), torch,
        openvino or openvino-bf16. ``small_first``: try a smaller first patch for small prompts (see the
        module's text; an attribute, so it can be switched between prompts)."""
        self.model = model
        self.settings = model.settings
        self.patch = tuple(model.plan.patch_size)
        self.small_patch = small_patch_for(self.patch, model.plan.shape_divisor)
        self.small_first = small_first
        self.seed = seed
        self.autozoom = autozoom
        self.runtime, self.runtime_reason = "given", "a runner was given"
        # what a full-patch pass costs here: calibration's measurement, then this session's own last pass
        self.pass_seconds: float | None = None
        self.pass_seconds_source = ""
        if runner is None:
            resolved = resolve_device(device)
            if resolved not in ("cpu", "cuda", "mps"):
                raise MedsegError(f"interactive segmentation runs on PyTorch devices (cpu, cuda, mps), not {resolved!r}")
            if resolved == "cpu":
                from medseg.model.interactive.runtimes import chosen_runtime, make_runner

                self.runtime, self.runtime_reason = chosen_runtime(model, runtime)
                runner = make_runner(model, self.runtime, model.source_path)
                self.pass_seconds, self.pass_seconds_source = calibrated_pass(model.source_path, self.runtime, CALIBRATED)
            else:
                self.runtime, self.runtime_reason = resolved, "a GPU device"
                runner = TorchRunner([model.build_network()], resolved, onednn=True, lean=True)
        self._runner = runner
        self._small_runner: Runner | None = None if self.runtime.startswith("openvino") else runner
        self._cancel: CancelToken | None = None
        self._progress: ProgressCallback | None = None
        self._planned = 0  # the running prompt's passes known so far
        self._pass: tuple[str, bool, float, bool] | None = None  # the pass begun: (its count as said, more, when,
        # not zoomed)
        self._image: NormalisedImage | None = None
        self.mask: np.ndarray = np.zeros((0, 0, 0), np.uint8)
        self._prompts: PromptStore | None = None
        self._undo: Undo | None = None
        self._seconds: dict[str, float] = {}
        self._passes = 0
        self._mode, self._first_patch = EXACT, self.patch

    @property
    def mode_text(self) -> str:
        """Which patches a prompt runs on, in words (for the plan and the command line's report)."""
        if not self.small_first:
            return f"exact: nnInteractive's {edges(self.patch)} patch"
        if self.small_patch is None:
            return f"exact: the {edges(self.patch)} patch has no smaller patch on the network's stride"
        runner = " on PyTorch (OpenVINO's export is fixed to the full patch)" if self.runtime.startswith("openvino") \
            else ""
        return (f"small first patch: {edges(self.small_patch)}{runner} for a small prompt, the exact "
                f"{edges(self.patch)} path when its answer reaches the small patch's faces")

    # -- image and object ------------------------------------------------------------------------
    def set_image(self, array: np.ndarray) -> None:
        """The image, (z, y, x) as stored (any numeric dtype); it is read, never copied whole."""
        if np.asarray(array).ndim != 3:
            raise PromptError(f"interactive segmentation needs a 3D image, got shape {np.shape(array)}")
        self._image = NormalisedImage(array)
        self.mask = np.zeros(self._image.shape, np.uint8)
        self._prompts = PromptStore(self._image.shape, self.settings.prompt_channels, self.settings.decay)
        self._undo = None

    def new_object(self) -> None:
        """Forget every prompt and the answer: the next prompt starts a new object."""
        image = self._need_image()
        self.mask = np.zeros(image.shape, np.uint8)
        self._prompts = PromptStore(image.shape, self.settings.prompt_channels, self.settings.decay)
        self._undo = None

    @property
    def prompt_count(self) -> int:
        return 0 if self._prompts is None else len(self._prompts.stamps)

    # -- prompts ---------------------------------------------------------------------------------
    def add_point(self, zyx: Sequence[float], positive: bool = True) -> PromptResult:
        """A click at voxel (z, y, x) (fractional coordinates are rounded as nnInteractive does)."""
        image = self._need_image()
        self._check_supported("points")
        centre = [round(c) for c in zyx]
        if not all(0 <= c < s for c, s in zip(centre, image.shape)) or len(centre) != 3:
            raise PromptError(f"point {tuple(zyx)} is outside the image (voxels {image.shape})")
        channel = self.settings.pair("points")[0 if positive else 1]
        return self._run(centre, [1, 1, 1], lambda store: store.add_point(channel, centre, self.settings.point_radius))

    def add_box(self, box: Sequence[Sequence[float]], positive: bool = True) -> PromptResult:
        """A box [[z0, z1], [y0, y1], [x0, x1]] (half-open voxels); flat (one voxel) along one axis unless the
        model takes 3D boxes."""
        image = self._need_image()
        if len(box) != 3 or any(len(b) != 2 for b in box):
            raise PromptError(f"a box needs [start, end] on 3 axes, got {box}")
        sizes = [b[1] - b[0] for b in box]
        if any(s == 0 for s in sizes):
            raise PromptError(f"box {box} has no extent along an axis")
        flat = sum(1 for s in sizes if s == 1)
        kind = "bbox2d" if flat and self.settings.supported.get("bbox2d") else "bbox3d"
        if not self.settings.supported.get(kind):
            raise PromptError(f"box {box} is 3D, and this model takes boxes drawn on one slice only",
                              hint="give the box one voxel of depth along the axis of the slice it was drawn on")
        clipped = []
        for (start, end), size in zip(([round(b[0]), round(b[1])] for b in box), image.shape):
            start, end = max(0, start), min(size, end)
            if end <= start:  # as nnInteractive: never let a clipped box vanish
                if start == 0:
                    end = min(1, size)
                else:
                    start = max(start - 1, 0)
            clipped.append([start, end])
        centre = [round((a + b) / 2) for a, b in clipped]
        channel = self.settings.pair(kind)[0 if positive else 1]
        return self._run(centre, [b - a for a, b in clipped], lambda store: store.add_box(channel, clipped))

    def add_scribble(self, mask: np.ndarray, origin: Sequence[int] = (0, 0, 0), positive: bool = True) -> PromptResult:
        """A painted stroke: ``mask`` (nonzero = painted) placed with its first voxel at ``origin``."""
        return self._add_mask("scribble", mask, origin, positive)

    def add_lasso(self, mask: np.ndarray, origin: Sequence[int] = (0, 0, 0), positive: bool = True) -> PromptResult:
        """A filled outline on one slice, as a mask (see :meth:`add_scribble`)."""
        return self._add_mask("lasso", mask, origin, positive)

    def _add_mask(self, kind: str, mask: np.ndarray, origin: Sequence[int], positive: bool) -> PromptResult:
        image = self._need_image()
        self._check_supported(kind)
        mask = np.asarray(mask)
        origin = [int(o) for o in origin]
        if mask.ndim != 3 or len(origin) != 3:
            raise PromptError(f"a {kind} is a 3D mask with a 3D origin, got shape {mask.shape} at {origin}")
        if any(o < 0 or o + n > s for o, n, s in zip(origin, mask.shape, image.shape)):
            raise PromptError(f"the {kind} ({mask.shape} at {tuple(origin)}) reaches outside the image {image.shape}")
        binary = (mask != 0).astype(np.uint8)
        hits = [np.flatnonzero(binary.any(axis=tuple(a for a in range(3) if a != axis))) for axis in range(3)]
        if any(h.size == 0 for h in hits):
            raise PromptError(f"the {kind} is empty")
        bounds = [[o + int(h[0]), o + int(h[-1]) + 1] for o, h in zip(origin, hits)]
        centre = [round((a + b) / 2) for a, b in bounds]
        channel = self.settings.pair(kind)[0 if positive else 1]
        return self._run(centre, [b - a for a, b in bounds], lambda store: store.add_mask(channel, binary, origin))

    def undo(self) -> bool:
        """Take back the last prompt (one level, as nnInteractive). False when there is nothing to undo."""
        record, self._undo = self._undo, None
        if record is None or self._prompts is None:
            return False
        if record.region is not None and record.before is not None:
            self.mask[tuple(slice(lo, hi) for lo, hi in record.region)] = record.before
        del self._prompts.stamps[record.stamps:]
        if record.rescaled is not None:
            self._prompts.stamps[:] = record.rescaled
        self._prompts.intensity = record.intensity
        return True

    def progress_with(self, callback: ProgressCallback | None) -> None:
        """Prompts from now on report each network pass as it starts and ends (stage ``pass-start`` /
        ``pass-end``: "pass 2 of 3: zoomed out 1.5x …"), on the thread that runs the prompt."""
        self._progress = callback

    def cost(self, extent: Sequence[int]) -> PromptCost:
        """What a prompt of ``extent`` voxels (z, y, x) will cost here, before it runs (:mod:`.cost`)."""
        small = self.small_first and self.small_patch is not None and first_zoom(extent, self.small_patch) == 1
        return prompt_cost(extent, self.patch, self.pass_seconds, self.pass_seconds_source, self.autozoom, small)

    def cancel_with(self, token: CancelToken | None) -> None:
        """Prompts from now on stop at the next network slab when ``token`` is cancelled (and leave the
        session as it was, as a failed prompt does)."""
        self._cancel = token

    # -- the order of operations -------------------------------------------------------------------
    def _run(self, centre: list[int], extent: list[int], draw: Callable[[PromptStore], None]) -> PromptResult:
        """``extent``: the prompt's size in voxels along each axis (a point's is 1)."""
        store = self._prompts
        assert store is not None
        undo = Undo(len(store.stamps), store.intensity, None)
        self._seconds, self._passes, self._planned, self._pass = {}, 0, 0, None
        self._mode, self._first_patch = EXACT, self.patch
        started = time.perf_counter()
        undo.rescaled = store.next_intensity()
        draw(store)
        try:
            # one job on the process's thread budget: a prompt beside a running segmentation shares the cores
            with medseg_threads.job("interactive prompt"):
                changed, zoom = self._predict(centre, extent, undo)
        except BaseException:
            self._undo = undo
            self.undo()  # a failed or cancelled prompt leaves the session as it was
            raise
        self._undo = undo
        self._seconds["total"] = time.perf_counter() - started
        return PromptResult(changed, zoom, self._passes, dict(self._seconds), self._mode, self._first_patch)

    def _predict(self, centre: list[int], extent: list[int], undo: Undo) -> tuple[Box | None, float]:
        zoom = min(MAX_ZOOM, float(first_zoom(extent, self.patch)))
        if self.small_first and self.small_patch is not None and zoom == 1 \
                and first_zoom(extent, self.small_patch) == 1:
            kept = self._small_first(centre, self.small_patch, undo)
            if kept is not False:
                return kept, zoom
        first = f"the {edges(self.patch)} patch around the prompt" if zoom == 1 else \
            f"the prompt's surroundings zoomed out {zoom:.3g}x"
        self._begin_pass(first, zoom > 1 or (self.autozoom and zoom < MAX_ZOOM), zoomed=zoom > 1)
        inputs, scaled, box, previous = self._network_input(centre, zoom)
        answer = self._forward(inputs)
        changed = self._timed("border", lambda: changed_at_border(answer, previous))
        while changed and self.autozoom and zoom < MAX_ZOOM:
            zoom = min(MAX_ZOOM, zoom * ZOOM_GROWTH)
            self._begin_pass(f"zoomed out {zoom:.3g}x (the object reached the patch's faces)", True, zoomed=True)
            inputs, scaled, box, previous = self._network_input(centre, zoom)
            answer = self._forward(inputs)
            changed = self._timed("border", lambda: changed_at_border(answer, previous))
        if zoom == 1:
            inside = clip_box(box, self.mask.shape)
            if inside is not None:
                self._record(undo, inside)
                self.mask[box_slices(inside)] = answer[local(inside, box)].numpy()
            return inside, zoom
        return self._refine(centre, answer, scaled, box, undo), zoom

    def _small_first(self, centre: list[int], small: tuple[int, ...], undo: Undo) -> Box | None | bool:
        """The prompt on the small cube around it: the box it rewrote (or None, outside the image), or False
        when the object reaches past the cube (before the pass or in its answer): then the exact path runs."""
        box = centred_box(centre, small)
        previous_np = crop_of(self.mask, box)
        if on_faces(previous_np).any():
            return False  # the object so far is larger than the small cube: it could not see it whole
        self._mode, self._first_patch = SMALL_THEN_EXACT, small
        self._begin_pass(f"the small first patch ({edges(small)})", True)
        previous = torch.from_numpy(previous_np).to(torch.float16)
        inputs = self._timed("crop", lambda: self._patch_input(box, previous))
        if self._small_runner is None:  # OpenVINO's export is fixed to the full patch: PyTorch runs any size
            from medseg.model.interactive.runtimes import make_runner

            self._small_runner = make_runner(self.model, "torch")
        answer = self._forward(inputs, self._small_runner)
        if self._timed("border", lambda: bool((on_faces(answer.numpy()) != on_faces(previous_np)).any())):
            return False
        self._mode = SMALL
        inside = clip_box(box, self.mask.shape)
        if inside is not None:
            self._record(undo, inside)
            self.mask[box_slices(inside)] = answer[local(inside, box)].numpy()
        return inside

    def _refine(self, centre: list[int], answer: torch.Tensor, scaled: list[int], box: Box, undo: Undo) -> Box | None:
        started = time.perf_counter()
        report(self._progress, self._passes / (self._planned + 1),
               f"pass {self._passes} done; planning the refinement at full resolution", "plan")
        if tuple(answer.shape) != tuple(scaled):
            coarse = (trilinear_resize(answer.to(torch.float32), scaled) >= 0.5).to(torch.uint8)
        else:
            coarse = answer.to(torch.uint8)
        coarse_np = coarse.numpy()
        seen = clip_box(box, self.mask.shape)
        boxes: list[Box] = []
        if seen is not None:
            region = changed_region(coarse_np[local(seen, box)], self.mask[box_slices(seen)])
            boxes = [[[lo + o, hi + o] for (lo, hi), (o, _) in zip(b, seen)]
                     for b in cover_boxes(region, self.patch, self.seed)]
        if not boxes:  # nothing changed: refine where the prompt is, as the user evidently wants something there
            boxes = [[[c - p // 2, c - p // 2 + p] for c, p in zip(centre, self.patch)]]
        cache = union_box(boxes)
        work = np.zeros([hi - lo for lo, hi in cache], np.uint8)  # the previous answer each patch sees
        inside = clip_box(cache, self.mask.shape)
        if inside is not None:
            work[local(inside, cache)] = self.mask[box_slices(inside)]
        injected = None if seen is None else clip_box([[max(a, c), min(b, d)] for (a, b), (c, d) in zip(seen, cache)],
                                                       self.mask.shape)
        if injected is not None:  # the coarse answer, where the patches will look
            work[local(injected, cache)] = coarse_np[local(injected, box)]
        self._seconds["plan"] = self._seconds.get("plan", 0.0) + time.perf_counter() - started
        self._planned = self._passes + len(boxes)
        for number, patch_box in enumerate(boxes, 1):
            self._begin_pass(f"refining at full resolution (patch {number} of {len(boxes)})", False)
            previous = torch.from_numpy(work[local(patch_box, cache)])
            inputs = self._timed("crop", lambda: self._patch_input(patch_box, previous))
            work[local(patch_box, cache)] = self._forward(inputs).numpy()
        if inside is not None:
            self._record(undo, inside)
        for patch_box in boxes:
            part = clip_box(patch_box, self.mask.shape)
            if part is not None:
                self.mask[box_slices(part)] = work[local(part, cache)]
        return inside

    # -- network input -----------------------------------------------------------------------------
    def _network_input(self, centre: list[int], zoom: float) -> tuple[torch.Tensor, list[int], Box, torch.Tensor]:
        started = time.perf_counter()
        scaled = [round(p * zoom) for p in self.patch]
        box = centred_box(centre, scaled)
        if list(scaled) == list(self.patch):
            previous = torch.from_numpy(crop_of(self.mask, box)).to(torch.float16)
            inputs = self._patch_input(box, previous)
        else:
            inputs, previous = self._zoomed_input(box, scaled, zoom)
        self._seconds["crop"] = self._seconds.get("crop", 0.0) + time.perf_counter() - started
        return inputs, scaled, box, previous

    def _patch_input(self, box: Box, previous: torch.Tensor) -> torch.Tensor:
        """Image and prompt channels over a patch-sized box; ``previous`` is the answer they refine."""
        assert self._image is not None and self._prompts is not None
        channels = torch.zeros([self.settings.prompt_channels, *[hi - lo for lo, hi in box]], dtype=torch.float16)
        for channel in range(self.settings.prompt_channels):
            if channel == self.settings.previous_channel:
                channels[channel] = previous
            else:
                self._prompts.render(channel, box, out=channels[channel])
        self._normalise_prompts(channels)
        return torch.cat((self._image.crop(box)[None], channels))

    def _zoomed_input(self, box: Box, scaled: list[int], zoom: float) -> tuple[torch.Tensor, torch.Tensor]:
        assert self._image is not None and self._prompts is not None
        width = round_to_odd(zoom * 2 - 1)
        dilated = set()
        if width > 1:
            for kind in ("points", "scribble"):
                if self.settings.supported.get(kind) and kind in self.settings.channels:
                    dilated.update(self.settings.pair(kind))
        previous_full = torch.from_numpy(crop_of(self.mask, box)).to(torch.float16)
        previous = nearest_resize(previous_full, self.patch)
        channels = torch.zeros([self.settings.prompt_channels, *self.patch], dtype=torch.float16)
        for channel in range(self.settings.prompt_channels):
            if channel == self.settings.previous_channel:
                values = previous_full
                if not values.any():
                    continue
            else:
                if self._prompts.is_empty_in(channel, box):
                    continue  # zeros stay zeros through every resize
                values = self._prompts.render(channel, box)
            if channel in dilated:
                values = dilate(values, width)
            channels[channel] = area_resize(values, self.patch)
        del previous_full
        image = trilinear_resize(self._image.crop(box), self.patch)
        self._normalise_prompts(channels)
        return torch.cat((image[None], channels)), previous

    def _normalise_prompts(self, channels: torch.Tensor) -> None:
        intensity = self._prompts.intensity if self._prompts is not None else 1.0
        if intensity in (0, 1):
            return
        for channel in range(channels.shape[0]):
            if channel != self.settings.previous_channel:
                channels[channel] /= intensity

    # -- helpers -----------------------------------------------------------------------------------
    def _begin_pass(self, what: str, more: bool, zoomed: bool = False) -> None:
        """Say that the next pass starts, before its input is made (at a zoom, resizing it takes a good part of
        the pass): ``what`` it is, and whether ``more`` passes may follow the ones known so far. A ``zoomed``
        pass (its input resized) is not what most passes cost: it is not the measure of the next ones."""
        number = self._passes + 1
        self._planned = max(self._planned, number)
        of = f"{self._planned} or more" if more else str(self._planned)
        left = ""
        if self.pass_seconds is not None:
            remaining = (self._planned - number + 1) * self.pass_seconds
            left = f", about {duration_text(remaining)}{' or more' if more else ''} left"
        self._pass = (of, more, time.perf_counter(), not zoomed)
        report(self._progress, (number - 1) / (self._planned + more), f"pass {number} of {of}: {what}{left}",
               "pass-start")

    def _forward(self, inputs: torch.Tensor, runner: Runner | None = None) -> torch.Tensor:
        started = time.perf_counter()
        full = runner is None or runner is self._runner
        runner = runner or self._runner
        token = self._cancel
        if token is not None:
            token.raise_if_cancelled()
        device = getattr(runner, "device", None)  # a TorchRunner takes its input on its device
        batch = inputs[None] if device is None else inputs[None].to(device)
        with slab_budget(SLAB_BYTES), cancellable(token.raise_if_cancelled if token is not None else None):
            logits = runner(batch, cancel=token) if token is not None and takes_cancel(runner) \
                else runner(batch)
        answer = logits[0].argmax(0).cpu()
        now = time.perf_counter()
        self._seconds["network"] = self._seconds.get("network", 0.0) + now - started
        self._passes += 1
        of, more, began, plain = self._pass if self._pass is not None else (str(self._passes), False, started, True)
        seconds = now - began  # the pass with the making of its input
        if full and plain and tuple(inputs.shape[1:]) == self.patch:
            self.pass_seconds, self.pass_seconds_source = seconds, LAST_PASS
        report(self._progress, self._passes / (self._planned + more),
               f"pass {self._passes} of {of} done in {duration_text(seconds)}", "pass-end")
        self._pass = None
        return answer

    def _timed(self, part: str, function: Callable):
        started = time.perf_counter()
        result = function()
        self._seconds[part] = self._seconds.get(part, 0.0) + time.perf_counter() - started
        return result

    def _record(self, undo: Undo, region: Box) -> None:
        undo.region = region
        undo.before = self.mask[box_slices(region)].copy()

    def _check_supported(self, kind: str) -> None:
        if not self.settings.supported.get(kind, False):
            raise PromptError(f"this model does not take {kind} prompts")

    def _need_image(self) -> NormalisedImage:
        if self._image is None:
            raise PromptError("no image: call set_image first")
        return self._image
