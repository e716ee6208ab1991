"""Label statistics of a segmentation over its CT, and the files they are written to.

Two definitions, one entry point: medseg's standard ones (:mod:`medseg.edit.stats`: ml, HU as
stored, SD n-1, percentiles, bounding box) and TotalSegmentator 2.18.0's ``--statistics``
(:mod:`medseg.edit.totalseg_stats`: mm³, the CT cast to int16, structures at the edge as 0).
``medseg stats``, the Statistics panel and the report ask here; a CSV or a JSON document is
chosen by the file's suffix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.edit.stats import LabelStats, is_stats_csv, is_stats_json, label_statistics, study_columns
from medseg.edit.totalseg_stats import TotalSegOptions

STANDARD, TOTALSEGMENTATOR = "standard", "totalsegmentator"
DEFINITIONS = (STANDARD, TOTALSEGMENTATOR)


@dataclass
class Statistics:
    """The figures of one segmentation, in one of the two definitions, with the study they are of."""

    definitions: str  # STANDARD or TOTALSEGMENTATOR
    table: dict[int, Label] = field(default_factory=dict)  # the labels measured (TOTALSEGMENTATOR's CSV: their values)
    study: dict[str, str] = field(default_factory=dict)  # leading CSV columns: series UID, description (name)
    labels: list[LabelStats] = field(default_factory=list)  # STANDARD: one per label with voxels
    figures: dict[str, dict] = field(default_factory=dict)  # TOTALSEGMENTATOR: its statistics.json entries
    options: TotalSegOptions | None = None  # TOTALSEGMENTATOR: its -sa / -sii / -sx

    def document(self) -> dict:
        """The JSON document (it says which definitions it follows)."""
        if self.definitions == TOTALSEGMENTATOR:
            from medseg.edit.totalseg_stats import totalseg_json

            return totalseg_json(self.figures, self.options or TotalSegOptions(), self.study)
        from medseg.edit.stats import stats_json

        return stats_json(self.labels, self.study)

    def write(self, path: str | os.PathLike) -> Path:
        """CSV or JSON by the suffix (.json: the document; else the table), written atomically."""
        from medseg.edit.stats import write_stats_csv, write_stats_json

        if str(path).lower().endswith(".json"):
            return write_stats_json(self.document(), path)
        if self.definitions == TOTALSEGMENTATOR:
            from medseg.edit.totalseg_stats import totalseg_csv
            from medseg.io.atomic import atomic_write_text

            values = {label.name: value for value, label in self.table.items()}
            return atomic_write_text(path, totalseg_csv(self.figures, values, self.options or TotalSegOptions(),
                                                        self.study))
        return write_stats_csv(self.labels, path, self.study)


def measure(image: Volume, label_map: Any, table: Mapping[int, Label], definitions: str = STANDARD,
            options: TotalSegOptions | None = None, study: dict[str, str] | None = None) -> Statistics:
    """The figures of ``label_map`` (a Volume or a LabelMap on ``image``'s grid) over ``image``."""
    if definitions not in DEFINITIONS:
        raise ValueError(f"definitions must be one of {DEFINITIONS}, not {definitions!r}")
    study = dict(study or {})
    if definitions == TOTALSEGMENTATOR:
        from medseg.edit.totalseg_stats import totalseg_statistics

        options = options or TotalSegOptions()
        return Statistics(definitions, dict(table), study, figures=totalseg_statistics(image, label_map, table, options),
                          options=options)
    return Statistics(definitions, dict(table), study, labels=label_statistics(image, label_map, table))


@dataclass(frozen=True)
class StatisticsRequest:
    """``medseg stats``: a segmentation file opened onto its CT, measured, and written where asked."""

    segmentation: str | os.PathLike
    study: Any  # medseg.workflows.studies.OpenStudyRequest
    definitions: str = STANDARD
    options: TotalSegOptions = TotalSegOptions()
    csv: str | os.PathLike | None = None
    json: str | os.PathLike | None = None
    patient_name: bool = False  # the patient's name in the study columns (left out by default)
    force: bool = False  # replace a --csv / --save-json that medseg did not write


@dataclass
class StatisticsResult:
    opened: Any  # medseg.workflows.studies.SegmentedStudy
    statistics: Statistics
    written: list[Path] = field(default_factory=list)


def segmentation_statistics(request: StatisticsRequest) -> StatisticsResult:
    """Check the outputs (before the CT is read, and against its files once it is), measure, write."""
    from medseg.workflows.outputs import check_not_a_source, check_output_file
    from medseg.workflows.studies import open_segmented_study, sidecar_of

    inputs = [request.segmentation, sidecar_of(request.segmentation), request.study.source]
    outputs = [(request.csv, ".csv", "--csv", is_stats_csv), (request.json, ".json", "--save-json", is_stats_json)]
    for out, suffix, option, ours in outputs:
        if out:
            check_output_file(out, inputs, force=request.force, ours=ours, option=option, suffix=suffix,
                              writable=True)
    opened = open_segmented_study(request.study, request.segmentation)
    for out, _suffix, option, _ours in outputs:
        if out:
            check_not_a_source(out, opened.volume, option)
    study = study_columns(opened.volume, patient_name=request.patient_name)
    statistics = measure(opened.volume, opened.segmentation.label_map, opened.segmentation.labels, request.definitions,
                         request.options, study)
    written = [statistics.write(out) for out in (request.csv, request.json) if out]
    return StatisticsResult(opened, statistics, written)


__all__ = ["STANDARD", "TOTALSEGMENTATOR", "DEFINITIONS", "Statistics", "TotalSegOptions", "LabelStats", "measure",
           "label_statistics", "study_columns", "StatisticsRequest", "StatisticsResult", "segmentation_statistics"]
