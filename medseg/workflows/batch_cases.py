"""What a batch segments: the cases found in folders, manifests and saved PACS queries.

- A **folder** (or a .zip / DICOMDIR / DICOM file) is scanned recursively: every loadable DICOM
  series is a case, and so is every NIfTI/NRRD/MHA file. Series that cannot be segmented
  (localizers, secondary captures, stacks that are not volumes) become rows marked *skipped*
  with the reason; a file that looks like an image but cannot be read (a DICOM file with a
  broken header, an unreadable image file) becomes a row marked *failed*. Other files
  (licences, notes) are counted, not listed.
- A **manifest** (.csv with a header, or .json: a list of objects, or ``{"cases": [...]}``) has
  one case per row: ``path`` (relative to the manifest), optional ``series_uid`` and ``case_id``.
- A **saved PACS query** (the output of ``medseg pacs query ... --series --json``) has one case
  per CT series; the series is retrieved through the PACS client and its cache when its turn comes.

Every problem that can be known before a case runs (a missing path, an unreadable manifest row,
a PACS query without a server) is a :class:`~medseg.errors.MedsegError` naming the file and line.
Case ids are stable across runs (a rerun finds its earlier results by them); with
de-identification they are keyed pseudonyms.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from medseg.errors import MedsegError

if TYPE_CHECKING:
    from medseg.io.deidentify import Deidentifier
    from medseg.io.dicom_scan import ScanResult, SeriesInfo

MANIFEST_SUFFIXES = (".csv", ".json")
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")  # no dots: a name's dots read as suffixes (UIDs are full of them)
# A skipped file is reported as a failed case when it was meant to be an image: a DICOM file whose
# header is broken, or a file named like one. Anything else in an archive folder is not a case.
_BROKEN_DICOM = ("unreadable DICOM header", "DICOM file without a transfer syntax")


class ManifestError(MedsegError):
    """A manifest or saved query cannot be used as it is."""


class NoCases(MedsegError):
    """The inputs hold nothing to segment: a batch that did nothing must not look like one that succeeded."""


@dataclass(frozen=True)
class Case:
    case_id: str
    source: str  # what the user pointed at: a path, or pacs:SERVER/STUDY/SERIES (never header values)
    kind: str  # "dicom", "image" or "pacs"
    files: tuple[str, ...] = ()  # the series' DICOM source references, or the image file
    series_uid: str = ""
    pacs: tuple[str, str, str] | None = None  # (server, study UID, series UID)
    status: str = ""  # "" to segment; "skipped" or "failed" when decided by the discovery
    reason: str = ""


@dataclass
class Discovery:
    cases: list[Case]
    ignored_files: int = 0  # files that are neither images nor DICOM (counted, not listed)
    notes: list[str] = field(default_factory=list)

    @property
    def runnable(self) -> list[Case]:
        return [case for case in self.cases if not case.status]


def slug(text: str) -> str:
    """A file-name-safe case id from a path or a name."""
    cleaned = _SAFE.sub("_", text).strip("_-")
    return cleaned[:120] or "case"


def _digest(text: str, length: int = 6) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:length]


class _Namer:
    """Case ids: readable from paths, or keyed pseudonyms when de-identifying; unique either way."""

    def __init__(self, deid: Deidentifier | None) -> None:
        self.deid = deid
        self.seen: dict[str, str] = {}

    def __call__(self, readable: str, identity: str, given: str = "") -> str:
        if self.deid is not None:
            case_id = "case-" + self.deid.pseudonym("case", identity, 16)
        else:
            case_id = slug(given) if given else slug(readable)
            if case_id in self.seen and self.seen[case_id] != identity:
                if given:
                    raise ManifestError(f"the case id {given!r} is used twice")
                case_id = f"{case_id}_{_digest(identity)}"
        self.seen[case_id] = identity
        return case_id


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _common_folder(files: Sequence[str]) -> Path:
    from medseg.io.dicom_sources import split_ref

    paths = [Path(split_ref(ref)[0]) for ref in files]
    if len(paths) == 1:
        return paths[0].parent if paths[0].suffix.lower() != ".zip" else paths[0]
    return Path(os.path.commonpath([str(p) for p in paths]))


_KIND_TEXT = {"localizer": "a localizer (scout), not a volume", "secondary_capture": "a secondary capture or colour "
              "image, not a CT volume", "not_a_volume": "not a volume"}


def _series_reason(series: SeriesInfo) -> str:
    reason = _KIND_TEXT.get(series.kind, series.kind)
    details = [f.message for f in series.findings if f.kind in ("duplicate_positions", "not_a_volume")]
    return reason + (f": {details[0]}" if details else "")


def _dicom_cases(scan: ScanResult, name_root: Path, namer: _Namer) -> tuple[list[Case], int]:
    """Cases of every series of a scan, failed rows for broken DICOM files, skipped rows for links that leave
    the input folder; and the count of other files."""
    from medseg.io.folder_walk import LINK_LEAVES
    from medseg.io.image_files import image_suffix

    cases: list[Case] = []
    folders: dict[Path, list[SeriesInfo]] = {}
    for series in scan.series:
        folders.setdefault(_common_folder(series.files), []).append(series)
    for folder, members in folders.items():
        for series in members:
            readable = _relative(folder, name_root)
            if len(members) > 1:
                readable += f"_s{series.series_number}" if series.series_number and \
                    sum(m.series_number == series.series_number for m in members) == 1 else f"_{_digest(series.key)}"
            identity = f"{folder}|{series.key}"
            case_id = namer(readable, identity)
            status, reason = ("", "") if series.loadable else ("skipped", _series_reason(series))
            cases.append(Case(case_id, str(folder), "dicom", tuple(series.files), series.series_uid,
                              status=status, reason=reason))
    ignored = 0
    for skipped in scan.skipped:
        if skipped.reason == LINK_LEAVES:  # listed, so the user sees why a study they linked did not run
            case_id = namer(_relative(Path(skipped.path), name_root), skipped.path)
            cases.append(Case(case_id, skipped.path, "dicom", status="skipped", reason=skipped.reason))
            continue
        if image_suffix(skipped.path) is not None:
            continue  # image files are cases of their own
        broken = skipped.broken or skipped.reason.startswith(_BROKEN_DICOM) or skipped.path.lower().endswith(".dcm")
        if not broken:
            ignored += 1
            continue
        case_id = namer(_relative(Path(skipped.path), name_root), skipped.path)
        cases.append(Case(case_id, skipped.path, "dicom", (skipped.path,), status="failed",
                          reason=f"unreadable DICOM file: {skipped.reason}"))
    return cases, ignored


def _image_files(folder: Path) -> list[Path]:
    from medseg.io.folder_walk import walk_files
    from medseg.io.image_files import image_suffix

    found = []
    for file in walk_files(folder).files:  # into links to folders inside it, as the DICOM scan
        path = Path(file)
        suffix = image_suffix(path.name)
        if suffix is None:
            continue
        if path.with_name(path.name[: -len(suffix)] + ".labels.json").is_file():
            continue  # a label map with its sidecar (e.g. medseg's own output), not an image
        found.append(path)
    return found


def _image_case(path: Path, name_root: Path, namer: _Namer, given: str = "") -> Case:
    from medseg.io.image_files import image_suffix

    suffix = image_suffix(path) or ""
    readable = _relative(path, name_root)
    readable = readable[: len(readable) - len(suffix)] if suffix else readable
    return Case(namer(readable, str(path.resolve()), given), str(path), "image", (str(path),))


def _scan_folder(path: Path, namer: _Namer, scan_fn: Callable[..., ScanResult]) -> tuple[list[Case], int]:
    from medseg.io.image_files import image_suffix

    name_root = path.parent
    result = scan_fn(path)
    cases, ignored = _dicom_cases(result, name_root, namer)
    images = _image_files(path) if path.is_dir() else ([path] if image_suffix(path) else [])
    cases += [_image_case(image, name_root, namer) for image in images]
    return cases, ignored


# --- manifests ------------------------------------------------------------------------------------------------


def _manifest_rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) for every case of a manifest; ManifestError names the line of a bad one."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeError) as error:
        raise ManifestError(f"cannot read the manifest ({error})", path=path) from error
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ManifestError(f"not valid JSON (line {error.lineno}: {error.msg})", path=path) from error
        items = data.get("cases") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ManifestError("a JSON manifest is a list of cases or {\"cases\": [...]}, each with a \"path\"",
                                path=path)
        rows = []
        for index, item in enumerate(items, 1):
            if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not item["path"].strip():
                raise ManifestError(f"case {index}: every case needs a \"path\" (a string)", path=path)
            rows.append((index, {k: str(v) for k, v in item.items() if v is not None}))
        return rows
    reader = csv.reader(text.splitlines())
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise ManifestError("the manifest is empty", path=path) from None
    if "path" not in header:
        raise ManifestError("the first line must name the columns, one of them \"path\" (optional: series_uid, "
                            "case_id)", path=path)
    rows = []
    for line_number, fields in enumerate(reader, 2):
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            raise ManifestError(f"line {line_number}: {len(fields)} fields where the header has {len(header)}",
                                path=path, hint="quote values that contain commas")
        row = {name: value.strip() for name, value in zip(header, fields)}
        if not row["path"]:
            raise ManifestError(f"line {line_number}: the path is empty", path=path)
        rows.append((line_number, row))
    return rows


def _manifest_cases(path: Path, namer: _Namer, scan_fn: Callable[..., ScanResult]) -> list[Case]:
    from medseg.io.image_files import image_suffix
    from medseg.io.load import choose_series

    rows = _manifest_rows(path)
    resolved = []
    for line, row in rows:  # every path is checked before anything is scanned
        target = Path(row["path"]).expanduser()
        target = target if target.is_absolute() else path.parent / target
        if not target.exists():
            raise ManifestError(f"line {line}: no such file or folder: {row['path']}", path=path)
        resolved.append((line, row, target))
    cases = []
    for line, row, target in resolved:
        given = row.get("case_id", "")
        if given and slug(given) != given:
            raise ManifestError(f"line {line}: the case id {given!r} may only hold letters, digits, '_' and '-'",
                                path=path)
        if target.is_file() and image_suffix(target) is not None:
            cases.append(_image_case(target, path.parent, namer, given))
            continue
        uid = row.get("series_uid", "")
        identity = f"{target.resolve()}|{uid}"
        readable = _relative(target, path.parent) + (f"_{_digest(uid)}" if uid else "")
        case_id = namer(readable, identity, given)
        try:
            result = scan_fn(target)
            series = result.find(uid) if uid else choose_series(result, target)
        except MedsegError as error:
            cases.append(Case(case_id, str(target), "dicom", status="failed", reason=error.message))
            continue
        if not series.loadable:
            cases.append(Case(case_id, str(target), "dicom", tuple(series.files), series.series_uid,
                              status="skipped", reason=_series_reason(series)))
            continue
        cases.append(Case(case_id, str(target), "dicom", tuple(series.files), series.series_uid))
    return cases


# --- saved PACS queries ---------------------------------------------------------------------------------------


def is_saved_query(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("studies"), list)


def _pacs_cases(path: Path, data: dict, server_name: str | None, namer: _Namer,
                list_series: Callable[[str, str], list[Any]] | None) -> list[Case]:
    server = server_name or data.get("server")
    if not server:
        raise ManifestError("this saved PACS query does not say which server it came from",
                            path=path, hint="give --pacs-server NAME (a server saved with `medseg pacs servers`)")
    cases = []
    for index, study in enumerate(data["studies"], 1):
        study_uid = str(study.get("study_uid") or "") if isinstance(study, dict) else ""
        if not study_uid:
            raise ManifestError(f"study {index} has no study_uid", path=path)
        series_list = study.get("series")
        if not series_list:
            if list_series is None:
                raise ManifestError(f"study {index} lists no series", path=path,
                                    hint="save the query with --series")
            series_list = [{"series_uid": s.series_uid, "modality": s.modality} for s in list_series(server, study_uid)]
        for item in series_list:
            series_uid = str(item.get("series_uid") or "")
            modality = str(item.get("modality") or "").upper()
            if not series_uid or (modality and modality != "CT"):
                continue
            source = f"pacs:{server}/{study_uid}/{series_uid}"
            case_id = namer(f"series_{series_uid}", source)
            cases.append(Case(case_id, source, "pacs", series_uid=series_uid, pacs=(server, study_uid, series_uid)))
    return cases


# --- everything -------------------------------------------------------------------------------------------------


def _refuse_no_cases(cases: list[Case], inputs: list[Path], ignored: int) -> None:
    """Nothing to segment (refused links aside) is an error: a batch that did nothing must not exit 0."""
    from medseg.io.folder_walk import LINK_LEAVES

    links = [c.source for c in cases if c.reason == LINK_LEAVES]
    if len(links) < len(cases):
        return
    where = "here" if len(inputs) == 1 else "under " + ", ".join(str(p) for p in inputs)
    found = f"no cases found: no DICOM series and no NIfTI/NRRD/MHA image {where}"
    if links:
        found += (f"; {len(links)} link(s) to folders outside it were not followed: "
                  + ", ".join(links[:5]) + (", …" if len(links) > 5 else ""))
    if ignored:
        found += f" ({ignored} other file(s) ignored)"
    raise NoCases(found, path=inputs[0] if len(inputs) == 1 else None,
                  hint="give the folder that holds the studies (links to folders inside it are followed)"
                  if not links else "give the folder the links point into, or copy the studies in")


def discover(inputs: Iterable[str | os.PathLike], *, deid: Deidentifier | None = None, pacs_server: str | None = None,
             scan_fn: Callable[..., ScanResult] | None = None,
             list_series: Callable[[str, str], list[Any]] | None = None) -> Discovery:
    """Every case under ``inputs``, sorted by case id; raises before any work for what cannot be used."""
    from medseg.io.dicom_scan import scan

    scan_fn = scan_fn or scan
    inputs = [Path(p).expanduser() for p in inputs]
    if not inputs:
        raise ManifestError("no inputs: give folders, image files, manifests (.csv/.json) or saved PACS queries")
    for path in inputs:
        if not path.exists():
            raise MedsegError("no such file or folder", path=path)
    namer = _Namer(deid)
    cases: list[Case] = []
    ignored = 0
    for path in inputs:
        suffix = path.suffix.lower()
        if path.is_file() and suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8-sig"))
            except (OSError, UnicodeError, ValueError) as error:
                raise ManifestError(f"cannot read this JSON file ({error})", path=path) from error
            if is_saved_query(data):
                cases += _pacs_cases(path, data, pacs_server, namer, list_series)
            else:
                cases += _manifest_cases(path, namer, scan_fn)
        elif path.is_file() and suffix == ".csv":
            cases += _manifest_cases(path, namer, scan_fn)
        else:
            found, skipped = _scan_folder(path, namer, scan_fn)
            cases += found
            ignored += skipped
    unique: dict[str, Case] = {}
    for case in cases:
        unique.setdefault(case.case_id, case)  # the same series named twice (a folder and a manifest) runs once
    ordered = sorted(unique.values(), key=lambda c: c.case_id)
    _refuse_no_cases(ordered, inputs, ignored)
    notes = [f"{ignored} file(s) are neither DICOM nor image files and were ignored"] if ignored else []
    return Discovery(ordered, ignored, notes)
