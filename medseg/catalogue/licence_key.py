"""TotalSegmentator's licensed tasks: the user's licence key, the download it unlocks, where it is kept.

TotalSegmentator serves the weights of its licensed (``commercial``) tasks only to licence holders:
an HTTPS POST to its backend's ``/download_weights`` with a JSON body of the licence number, the task
name and the TotalSegmentator version answers the task's zip (``libs.download_model_with_license_and_unpack``).
medseg sends the same request through its own download code (medseg.catalogue.download: verified,
atomic, resumed where the server allows it) with the key the user gives:

- the key is never guessed: not read from TotalSegmentator's config.json, not taken from another model;
  only the key given for this model, or the one stored when this same model was installed with it;
- its shape is checked before anything is sent: TotalSegmentator's own offline check is 18 characters;
- it is kept beside the installed model's record in ``licence-key``, a file only the user can read
  (0600), and nowhere else: the install record says only that a key was given, and errors, progress
  and ``medseg models info`` show it masked (its last 4 characters).
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from medseg.catalogue.download import Downloaded, download
from medseg.catalogue.entries import ModelEntry, WeightFile
from medseg.errors import DownloadError, LicenceNotAccepted, SaveError
from medseg.io.atomic import atomic_path
from medseg.progress import CancelToken, ProgressCallback

if TYPE_CHECKING:
    from medseg.catalogue.record import InstallRecord

LICENSED_SPDX = "LicenseRef-TotalSegmentator-Licensed"
# TotalSegmentator's backend (libs.py); a test points this at a server on 127.0.0.1.
LICENCE_SERVER = "https://backend.totalsegmentator.com:443/download_weights"
ACADEMIC_LICENCE = "https://backend.totalsegmentator.com/license-academic/"
COMMERCIAL_CONTACT = "jakob.wasserthal@usb.ch"
KEY_LENGTH = 18  # TotalSegmentator's has_valid_license_offline: the whole offline check
KEY_FILE = "licence-key"
# TotalSegmentator asks for a network by the task name its dict commercial_models maps to it, inverted:
# two tasks share dataset 857 and the inversion keeps the last one, so the CT task's zip is asked for
# under the MR task's name. Every other licensed network is asked for under its own task's name.
_REQUESTED_AS = {857: "thigh_shoulder_muscles_mr"}
_SERVER_ANSWER_LIMIT = 4096  # a refusal is a short JSON object, the weights a zip


class LicenceKeyError(LicenceNotAccepted):
    """A licensed task without a usable licence key (missing, of the wrong shape, refused by the server)."""


def needs_key(entry: ModelEntry) -> bool:
    """A TotalSegmentator task whose weights its publisher sends only to licence holders."""
    return entry.licence.spdx == LICENSED_SPDX


def masked(key: str) -> str:
    """The key as medseg ever shows it: its last 4 characters."""
    return "…" + key[-4:] if len(key) > 4 else "…"


def where_to_get_one() -> str:
    return (f"a free licence for non-commercial use: {ACADEMIC_LICENCE} ; "
            f"for commercial use contact the author ({COMMERCIAL_CONTACT})")


def check_key(entry: ModelEntry, key: str | None) -> str:
    """The key to use for ``entry``, checked offline as TotalSegmentator checks it; LicenceKeyError when
    the task needs one and none was given, or the key has the wrong shape."""
    if key is None or not key.strip():
        raise LicenceKeyError(
            f"{entry.id} is one of TotalSegmentator's licensed tasks: it is installed only with your "
            f"TotalSegmentator licence key, and none was given",
            hint=f"get {where_to_get_one()}; then `medseg models install {entry.id} --licence-key KEY` "
                 "(or the key field of the Models dialog)")
    key = key.strip()
    if len(key) != KEY_LENGTH or any(c.isspace() or not c.isprintable() for c in key):
        raise LicenceKeyError(
            f"the licence key for {entry.id} is not a TotalSegmentator licence key: it has {len(key)} "
            f"characters, a key has {KEY_LENGTH} without spaces; nothing was downloaded",
            hint="copy the key from the licence e-mail again")
    return key


def check_no_key_needed(entry: ModelEntry, key: str | None) -> None:
    if key is not None and not needs_key(entry):
        raise LicenceKeyError(f"{entry.id} is not a licensed TotalSegmentator task: it needs no licence key",
                              hint=f"`medseg models install {entry.id}` without --licence-key")


def requested_task(entry: ModelEntry, weight: WeightFile) -> str:
    """The task name TotalSegmentator's backend serves ``weight`` under."""
    return _REQUESTED_AS.get(weight.dataset, str(entry.task)) if weight.dataset is not None else str(entry.task)


def request_body(entry: ModelEntry, weight: WeightFile, key: str) -> dict[str, str]:
    """TotalSegmentator's JSON body (license_number, task, version), as its own download sends it."""
    return {"license_number": key, "task": requested_task(entry, weight), "version": entry.version}


def fetch_licensed(entry: ModelEntry, weight: WeightFile, key: str, part: Path, *,
                   progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> Downloaded:
    """POST for ``weight``'s zip with ``key``; a refusal is a LicenceKeyError that shows the key masked."""
    try:
        got = download(LICENCE_SERVER, part, expected_sha256=weight.sha256, expected_size=weight.size,
                       progress=progress, cancel=cancel, what=weight.name,
                       json_body=request_body(entry, weight, key))
    except DownloadError as error:
        if getattr(error, "http_status", None) in (400, 401, 403) or getattr(error, "server_status", None):
            raise _refused(entry, key, getattr(error, "server_status", None)
                           or f"HTTP {error.http_status}") from error  # type: ignore[attr-defined]
        raise
    if not zipfile.is_zipfile(got.path):  # the server answered, but not with the weights
        answer = _server_answer(got.path)
        got.path.unlink(missing_ok=True)  # never resumed: it is not the start of the zip
        raise _refused(entry, key, answer)
    return got


def _refused(entry: ModelEntry, key: str, said: str) -> LicenceKeyError:
    return LicenceKeyError(
        f"TotalSegmentator's licence server did not send {entry.id} for the key ending {masked(key)} "
        f"({said}); nothing was installed",
        hint=f"check the key (a licence covers the tasks it names); get {where_to_get_one()}")


def _server_answer(path: Path) -> str:
    """What a non-zip answer says, in a few words (its JSON 'status', as TotalSegmentator reads it)."""
    with open(path, "rb") as stream:
        head = stream.read(_SERVER_ANSWER_LIMIT)
    try:
        status = json.loads(head.decode("utf-8")).get("status")
    except (ValueError, AttributeError):
        status = None
    if isinstance(status, str) and re.fullmatch(r"[A-Za-z0-9_ .-]{1,60}", status):
        return status
    return "its answer is not a zip"


# --- the stored key -----------------------------------------------------------------------------------
def store_key(model_folder: Path, key: str) -> Path:
    """Write ``key`` beside the model's record, readable by the user alone (0600 before the key is in it)."""
    path = model_folder / KEY_FILE
    with atomic_path(path, suffix=".tmp") as temp:
        os.chmod(temp, 0o600)  # the temporary is still empty here: the key is never in a wider-open file
        with open(temp, "w", encoding="utf-8") as out:
            out.write(key + "\n")
    if os.name == "posix" and path.stat().st_mode & 0o077:
        path.unlink(missing_ok=True)
        raise SaveError("the licence key could not be kept private (the file is readable by others)", path=path)
    return path


def stored_key(model_folder: Path | None) -> str | None:
    """The key stored with this model when it was installed with one (None: none, or not readable)."""
    if model_folder is None:
        return None
    try:
        key = (model_folder / KEY_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return key or None


def key_summary(record: InstallRecord) -> str:
    """How ``medseg models info`` and the Models dialog describe the key of an installed model."""
    if record.licence.get("spdx") != LICENSED_SPDX:
        return ""
    if record.licence.get("key_given"):
        key = stored_key(record.folder)
        if key is not None:
            return f"licence key {masked(key)} (stored with the model, readable by you only)"
        return "licence key given at install; not readable here"
    return record.licence.get("key_note") or "installed without a licence key on this machine"
