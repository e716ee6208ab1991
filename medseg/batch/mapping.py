"""The re-identification mapping of a de-identified batch: written only when asked, only sealed with the key.

Each process appends its sealed records (one Fernet token per line, see
:meth:`medseg.io.deidentify.Deidentifier.seal`) to a journal of its own beside the mapping
file; process 0 merges every journal into the mapping file at the end, the latest record of
each case winning. The journals and the mapping hold nothing readable without the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medseg.workflows.deidentify import Deidentifier, write_mapping
from medseg.workflows.outputs import append_synced


def journal_path(mapping: Path, rank: int) -> Path:
    return mapping.with_name(f".{mapping.name}.rank{rank}.part")


def record(case_id: str, source: str, meta: Any, deid: Deidentifier) -> dict[str, Any]:
    """Who a pseudonymous case is: the source and the original identifiers beside their replacements."""
    return {
        "case_id": case_id, "source": source, "patient_id": meta.patient_id, "patient_name": meta.patient_name,
        "study_uid": meta.study_uid, "series_uid": meta.series_uid,
        "deidentified": {"patient_id": deid.patient_id(meta.patient_id) if meta.patient_id else "",
                         "study_uid": deid.uid(meta.study_uid), "series_uid": deid.uid(meta.series_uid)},
    }


class MappingJournal:
    def __init__(self, mapping: Path, rank: int, deid: Deidentifier) -> None:
        self.path = journal_path(mapping, rank)
        self.deid = deid
        self._handle = open(self.path, "ab")
        os.chmod(self.path, 0o600)

    def append(self, entry: dict[str, Any]) -> None:
        # appended, not replaced (medseg.io.atomic says why); a leading newline ends a line cut by a kill
        append_synced(self._handle, ("\n" + self.deid.seal(entry) + "\n").encode("ascii"))

    def close(self) -> None:
        self._handle.close()


def merge_mapping(mapping: Path, deid: Deidentifier, case_ids: set[str]) -> Path:
    """The mapping file from every process's journal (records of the cases of this batch)."""
    from medseg.workflows.deidentify import DeidentificationKeyError

    latest: dict[str, dict[str, Any]] = {}
    for journal in sorted(mapping.parent.glob(f".{mapping.name}.rank*.part")):
        for line in journal.read_text(encoding="ascii", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                entry = deid.open_sealed(line)
            except DeidentificationKeyError:
                continue  # cut short by a kill, or a journal of another key
            if entry.get("case_id") in case_ids:
                latest[entry["case_id"]] = entry
    return write_mapping(mapping, deid, [latest[k] for k in sorted(latest)])
