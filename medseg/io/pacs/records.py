"""What a query asks and what it returns: plain records shared by DICOMweb and DIMSE."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from medseg.io.pacs.errors import PacsError

_DATE = re.compile(r"^\d{8}$")


@dataclass(frozen=True)
class QueryFilters:
    """Study-level filters. Empty strings match everything; names accept * wildcards."""

    patient_id: str = ""
    patient_name: str = ""
    birth_date: str = ""  # YYYYMMDD
    date_from: str = ""  # study date range, YYYYMMDD, either end open
    date_to: str = ""
    modality: str = ""
    accession_number: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        for label, value in (("birth date", self.birth_date), ("start date", self.date_from),
                             ("end date", self.date_to)):
            if value and not _DATE.match(value):
                raise PacsError(f"{label} '{value}' is not a date", hint="use YYYYMMDD, e.g. 20240131")
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise PacsError(f"the study date range {self.date_from}-{self.date_to} is empty",
                            hint="the start date must not be after the end date")

    @property
    def study_date(self) -> str:
        """The DICOM range matching the two dates ("" when neither is set)."""
        if not (self.date_from or self.date_to):
            return ""
        if self.date_from == self.date_to:
            return self.date_from
        return f"{self.date_from}-{self.date_to}"

    def keywords(self) -> dict[str, str]:
        """Non-empty filters by DICOM keyword."""
        pairs = {"PatientID": self.patient_id, "PatientName": self.patient_name,
                 "PatientBirthDate": self.birth_date, "StudyDate": self.study_date,
                 "ModalitiesInStudy": self.modality.upper(), "AccessionNumber": self.accession_number,
                 "StudyDescription": self.description}
        return {k: v for k, v in pairs.items() if v}


@dataclass(frozen=True)
class StudyRecord:
    study_uid: str
    patient_id: str = ""
    patient_name: str = ""
    birth_date: str = ""
    study_date: str = ""
    description: str = ""
    accession_number: str = ""
    modalities: tuple[str, ...] = ()
    series_count: int | None = None
    instance_count: int | None = None


@dataclass(frozen=True)
class SeriesRecord:
    study_uid: str
    series_uid: str
    modality: str = ""
    number: str = ""
    description: str = ""
    instance_count: int | None = None


@dataclass(frozen=True)
class QueryPage:
    """One page of studies; ``more`` says whether a next page exists."""

    studies: list[StudyRecord]
    offset: int
    more: bool


@dataclass(frozen=True)
class SendResult:
    """The server's answer for one instance sent."""

    path: str
    sop_instance_uid: str
    ok: bool
    status: str  # "0x0000", "HTTP 200", a failure reason ...


@dataclass
class RetrieveResult:
    folder: str
    expected: int
    received: int  # instances that arrived in this call
    already_cached: int  # instances found from an earlier, interrupted call
    complete: bool
    seconds: float = 0.0
    nbytes: int = 0
    missing: list[str] = field(default_factory=list)
