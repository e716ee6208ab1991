"""One case of a batch: read it (open, check, prepare), then segment, measure and save it.

``medseg batch`` (:mod:`medseg.batch.run`) keeps what only a batch has — the resumable table, the
prefetch of the next case, the processes, the signals — and calls this for each case, so a case
is segmented exactly as ``medseg segment`` segments it: the same checks (an MR series without
``--allow-modality``, a label map given as a CT are refused, and the batch records the refusal as
the case's failed row), the same device, model, post-processing, labels and writers.

The work is split in two because a batch reads case *i + 1* (on a thread) while the network runs
on case *i*: :meth:`BatchCase.read` does everything before the network and every refusal;
:meth:`BatchCase.finish` runs the network and writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from medseg.progress import CancelToken, ProgressCallback
from medseg.workflows.save import DICOM_SEG, SaveTarget, save_segmentation
from medseg.workflows.segment import PreparedStudy, SegmentedStudy, Segmenter
from medseg.workflows.studies import OpenStudyRequest


@dataclass
class CaseResult:
    """A case segmented, measured and (when there is something to write) saved."""

    segmented: SegmentedStudy
    statistics: list[Any]  # medseg.edit.stats.LabelStats of each label present
    output: Path | None  # None: nothing written (DICOM has no empty SEG), and ``not_written`` says why
    not_written: str = ""
    notes: list[str] = field(default_factory=list)  # the checks' and the writer's notes


class BatchCase:
    """How a batch's cases are read and written: one Segmenter, optional de-identification (the format of each
    output is its name's)."""

    def __init__(self, segmenter: Segmenter, *, deidentifier: Any = None, regularize: bool = True) -> None:
        self.segmenter = segmenter
        self.deidentifier = deidentifier
        self.regularize = regularize

    def target(self, output: Path) -> SaveTarget:
        from medseg.workflows.save import plan_save

        return plan_save(output, force=True)  # a batch replaces its own outputs (the table says which are done)

    def read(self, source: str | os.PathLike | Sequence[str | os.PathLike], output: Path,
             cancel: CancelToken | None = None) -> PreparedStudy:
        """Open the case and do everything before the network; every refusal is raised here (a MedsegError)."""
        image = self.segmenter.open(OpenStudyRequest(source, regularize=self.regularize), cancel=cancel)
        target = self.target(output)
        if target.format == DICOM_SEG:
            from medseg.io.dicom_seg_write import check_can_reference

            check_can_reference(image)
        return self.segmenter.prepare(image, cancel=cancel)

    def finish(self, prepared: PreparedStudy, output: Path, stats_csv: Path | None = None,
               progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> CaseResult:
        """Segment, measure (``stats_csv``: also write the full statistics) and save."""
        from medseg.edit.stats import label_statistics, write_stats_csv

        segmented = self.segmenter.run(prepared, progress, cancel)
        statistics = label_statistics(prepared.image, segmented.label_map, self.segmenter.card.labels)
        if stats_csv is not None:
            write_stats_csv(statistics, stats_csv)
        target = self.target(output)
        notes = list(segmented.notes)
        if target.format == DICOM_SEG and not statistics:  # DICOM has no empty SEG: measured, not written
            return CaseResult(segmented, statistics, None, "no label found: no DICOM SEG written", notes)
        if self.deidentifier is None:
            target.check_image(prepared.image)  # an output may not be one of the case's own files
        labels = {**self.segmenter.card.labels, **segmented.labels}  # described the same way, present or not
        saved = save_segmentation(target, segmented.label_map, prepared.image, labels, self.deidentifier)
        return CaseResult(segmented, statistics, output, "", [*notes, *saved.notes])


__all__ = ["BatchCase", "CaseResult"]
