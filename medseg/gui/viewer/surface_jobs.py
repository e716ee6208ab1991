"""The 3D view's meshing in a worker: the whole label map after Segment or open, only the
changed bricks after an edit, one job at a time, edits that arrive meanwhile queued and merged.

One :class:`~medseg.io.surface_bricks.SurfaceBricks` per label map holds the full surfaces; the
coarse copies drawn while the mouse turns the scene are made from them
(:mod:`medseg.io.surface_lod`, a tenth of a second for 117 structures, where meshing the map a
second time took seconds). The worker reads the live label map (no copy); an edit made while it
reads is queued and re-meshed after, so the surfaces always end up matching the map.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from PySide6.QtCore import QEventLoop, QObject, QTimer, Signal

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.jobs import Job
from medseg.io.surface_lod import coarse_copies
from medseg.job_registry import JobRegistry

log = logging.getLogger(__name__)

COARSE_BUDGET = 30_000  # triangles drawn while turning: about 8 ms of llvmpipe CPU here (0.25 µs a triangle)

Edit = tuple[tuple, tuple, set[int]]  # (z, y, x) low, high, label values


class SurfaceMesher(QObject):
    meshed = Signal(str, object, object)  # "all" | "some", {value: Surface | None} full, the same coarse
    failed = Signal(object)
    started = Signal()
    idle = Signal()  # nothing meshing, nothing waiting

    def __init__(self, document: SegmentationDocument, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.enabled = False  # no meshing until there is a view to show it
        self.fine: Any = None  # SurfaceBricks of the label map
        self._job: Job | None = None
        self._registry = JobRegistry()  # its own: a re-mesh is too short-lived for the status bar
        self._generation = 0
        self._rebuild_pending = False
        self._edits: list[Edit] = []

    @property
    def busy(self) -> bool:
        return self._job is not None or bool(self._edits) or (self._rebuild_pending and self.enabled)

    def label_map_changed(self) -> None:
        self._generation += 1
        self._rebuild_pending = True
        self._edits.clear()
        self.schedule()

    def label_map_edited(self, edit) -> None:
        if not self.enabled or self._rebuild_pending:
            return  # no view yet, or a whole rebuild not yet started: it reads the edited map
        lo, hi = edit.box
        self._edits.append((tuple(lo), tuple(hi), {int(v) for v in edit.values}))
        self.schedule()

    def schedule(self) -> None:
        if self._job is None and self.enabled:
            self._start_next()
        if not self.busy:
            self.idle.emit()

    def _start_next(self) -> None:
        label_map, volume = self.document.label_map, self.document.volume
        if self._rebuild_pending:
            self._rebuild_pending = False
            if label_map is None or volume is None:
                self.fine = None
                self.meshed.emit("all", {}, {})
                return
            from medseg.io.surface_bricks import SurfaceBricks

            self.fine = fine = SurfaceBricks(volume)
            array, values = label_map.array, [v for v in label_map.labels if label_map.voxel_count(v)]

            def rebuild(progress=None, cancel=None):
                surfaces = fine.rebuild(array, values)
                return "all", surfaces, coarse_copies(surfaces, fine.triangles(), COARSE_BUDGET)

            self._start(rebuild)
            return
        if not self._edits or self.fine is None or label_map is None:
            return
        edits, self._edits = merge_edits(self._edits), []
        fine, array = self.fine, label_map.array
        counts = {v: label_map.voxel_count(v) for _lo, _hi, values in edits for v in values}

        def work(progress=None, cancel=None):
            changed: dict = {}
            for lo, hi, values in edits:
                changed.update(fine.update(array, (lo, hi), values, counts))
            return "some", changed, coarse_copies(changed, fine.triangles(), COARSE_BUDGET)

        self._start(work)

    def _start(self, work) -> None:
        generation = self._generation
        self._job = Job("3D surfaces", work, self, registry=self._registry, cancellable=False, computes=True)
        self._job.finished_ok.connect(lambda result: self._on_done(result, generation))
        self._job.finished_error.connect(self._on_failed)
        self.started.emit()
        self._job.start()

    def _finish_job(self) -> None:
        if self._job is not None:
            self._job.deleteLater()  # one job per edit: do not keep their threads as children
            self._job = None

    def _on_done(self, result, generation: int) -> None:
        self._finish_job()
        if generation == self._generation:  # else a newer label map is waiting to be meshed
            self.meshed.emit(*result)
        self.schedule()

    def _on_failed(self, error: BaseException) -> None:
        self._finish_job()
        log.error("3D surfaces failed", exc_info=error)
        self.failed.emit(error)
        self.schedule()

    def wait_idle(self, timeout_ms: int = 120_000) -> bool:
        """Run the event loop until nothing is meshing or waiting (tests, screenshots). True if idle."""
        if not self.busy:
            return True
        loop = QEventLoop()
        self.idle.connect(loop.quit)
        QTimer.singleShot(timeout_ms, loop.quit)
        loop.exec()
        self.idle.disconnect(loop.quit)
        return not self.busy

    def shutdown(self) -> None:
        # No meshing after this: closing the window changes the document, and a job started then
        # was still running when Qt destroyed its thread (an abort at exit in the walkthrough test).
        self.enabled = False
        if self._job is not None:
            self._job.wait_stopped()
            self._job = None


def merge_edits(edits: list[Edit]) -> list[Edit]:
    """Edits close together (a stroke's many small writes) become one box; far ones stay apart."""
    merged: list[list[Any]] = []
    for lo, hi, values in edits:
        for box in merged:
            union_lo = tuple(min(a, b) for a, b in zip(box[0], lo))
            union_hi = tuple(max(a, b) for a, b in zip(box[1], hi))
            union = math.prod(h - l for l, h in zip(union_lo, union_hi))
            parts = math.prod(h - l for l, h in zip(box[0], box[1])) + math.prod(h - l for l, h in zip(lo, hi))
            if union <= 2 * parts + 32 ** 3:
                box[0], box[1] = union_lo, union_hi
                box[2] |= values
                break
        else:
            merged.append([lo, hi, set(values)])
    return [(tuple(lo), tuple(hi), values) for lo, hi, values in merged]
