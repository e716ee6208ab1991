"""Resumable, verified HTTP downloads.

- **Resume**: bytes already in ``<name>.part`` are kept; the request asks for the rest with an
  HTTP ``Range`` header, and a server that answers 200 instead of 206 starts the file again.
- **Proxy** from the environment (``https_proxy``, ``http_proxy``, ``no_proxy``), as urllib
  reads it; nothing else is configured and nothing but the request for the file is sent.
- **Verified**: the SHA-256 is computed while the bytes arrive (and over the resumed part);
  a published checksum that differs deletes the part file and raises ChecksumMismatch.
- **Errors a user can act on**: offline (no route, name not resolved, refused), an HTTP
  status, a file shorter than announced, the disk full (checked before and while writing).
- **Cancel** between blocks (medseg.progress.CancelToken): the part file stays for a resume.
- **POST** with a JSON body where a publisher serves its files so (TotalSegmentator's licensed tasks:
  medseg.catalogue.licence_key); the body may hold a secret, so it is never part of a message.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import shutil
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medseg import __version__
from medseg.errors import ChecksumMismatch, DownloadError, OfflineError, ResourceLimitError
from medseg.io.atomic import sync_file
from medseg.progress import CancelToken, ProgressCallback, report

BLOCK = 1 << 20
TIMEOUT_S = 60.0  # per read, not for the whole file
DISK_MARGIN = 64 << 20  # keep this much free beyond the download
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class Downloaded:
    path: Path
    size: int
    sha256: str
    resumed_from: int  # bytes that were already there (0: a fresh download)


def download(url: str, part: Path, *, expected_sha256: str | None = None, expected_size: int | None = None,
             progress: ProgressCallback | None = None, cancel: CancelToken | None = None,
             timeout: float = TIMEOUT_S, what: str | None = None, json_body: dict[str, Any] | None = None) -> Downloaded:
    """Fetch ``url`` into ``part`` (resuming what is there); return its size and SHA-256.

    ``part`` is left for a later resume when the transfer stops (network, cancel); it is deleted
    when its checksum is wrong. The caller renames or unpacks it once this returns.
    """
    what = what or part.name
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.is_file() else 0
    if expected_size is not None and have > expected_size:
        part.unlink()
        have = 0
    headers = {"User-Agent": f"medseg/{__version__}", "Accept-Encoding": "identity"}
    data = None
    if json_body is not None:
        data = json.dumps(json_body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.build_opener().open(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have and _complete_after_416(error, have, expected_size):
            return _finish(part, have, expected_sha256, what, resumed_from=have)
        said = _server_status(error)
        refusal = DownloadError(f"the server answered HTTP {error.code} {error.reason}"
                                f"{f' ({said})' if said else ''} for {url}", hint=_status_hint(error.code))
        refusal.http_status, refusal.server_status = error.code, said  # type: ignore[attr-defined]
        raise refusal from error
    except (urllib.error.URLError, OSError) as error:
        raise _network_error(url, error) from error
    with response:
        status = getattr(response, "status", 200)
        start = 0
        if status == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if match is None or int(match[1]) != have:
                raise DownloadError(f"the server resumed {url} at the wrong place "
                                    f"({response.headers.get('Content-Range')!r}, asked for byte {have})")
            start = have
        total = _total_size(response, start, expected_size)
        if expected_size is not None and total is not None and total != expected_size:
            raise DownloadError(f"{url} is {total} bytes, the catalogue says {expected_size}",
                                hint="the published file changed; update medseg or ask its publisher")
        if total is not None:
            _check_space(part.parent, total - start)
        digest = hashlib.sha256()
        if start:
            _hash_into(digest, part)
        received = start
        mode = "ab" if start else "wb"
        try:
            with open(part, mode) as out:
                while True:
                    if cancel is not None:
                        cancel.raise_if_cancelled()
                    try:
                        block = response.read1(BLOCK)  # what has arrived, not a full block: progress and a cancel stay live
                    except (OSError, ValueError) as error:  # reset, timeout, truncated chunk
                        raise _network_error(url, error, received) from error
                    if not block:
                        break
                    out.write(block)
                    out.flush()  # on disk at once: a kill keeps every byte received for the resume
                    digest.update(block)
                    received += len(block)
                    if total:
                        report(progress, received / total, f"{what}: {_mb(received)} of {_mb(total)}", "download")
                    else:
                        report(progress, 0.0, f"{what}: {_mb(received)}", "download")
                # not an atomic replace: the part file must keep every byte received for a resume, and
                # its checksum, not a rename, says when it is whole (medseg.io.atomic)
                sync_file(out)
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ResourceLimitError("the disk is full", path=part,
                                         hint="free some space; the download resumes where it stopped") from error
            raise DownloadError(f"cannot write the download ({error.strerror})", path=part) from error
    if total is not None and received != total:
        raise DownloadError(f"the transfer of {url} stopped after {received} of {total} bytes",
                            hint="run the install again: it resumes where it stopped")
    return _finish(part, received, expected_sha256, what, resumed_from=start, digest=digest.hexdigest())


def _finish(part: Path, size: int, expected_sha256: str | None, what: str, resumed_from: int,
            digest: str | None = None) -> Downloaded:
    if digest is None:
        digest_obj = hashlib.sha256()
        _hash_into(digest_obj, part)
        digest = digest_obj.hexdigest()
    if expected_sha256 is not None and digest != expected_sha256.lower():
        part.unlink(missing_ok=True)  # a wrong file is never resumed
        raise ChecksumMismatch(what, expected_sha256.lower(), digest, what=what)
    return Downloaded(part, size, digest, resumed_from)


def _hash_into(digest: Any, path: Path) -> None:  # a hashlib object (its type is private)
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(BLOCK), b""):
            digest.update(block)


def _total_size(response: Any, start: int, expected: int | None) -> int | None:
    match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
    if match and match[3] != "*":
        return int(match[3])
    length = response.headers.get("Content-Length")
    if length is not None and length.isdigit():
        return start + int(length)
    return expected


def _complete_after_416(error: urllib.error.HTTPError, have: int, expected: int | None) -> bool:
    """416 to a resume: the part file already holds the whole file (``bytes */N`` with N == have)."""
    match = re.match(r"bytes \*/(\d+)", error.headers.get("Content-Range", "") if error.headers else "")
    return (match is not None and int(match[1]) == have) or (expected is not None and expected == have)


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if needed + DISK_MARGIN > free:
        raise ResourceLimitError(f"the disk is full: the download needs {_mb(needed)}, {_mb(free)} are free",
                                 path=folder, hint="free some space or set MEDSEG_MODELS to a larger disk")


def _network_error(url: str, error: BaseException, received: int | None = None) -> DownloadError:
    reason = getattr(error, "reason", error)
    host = urllib.parse.urlparse(url).netloc
    if isinstance(reason, (socket.gaierror, ConnectionRefusedError, ConnectionResetError)) or (
            isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED)):
        after = f" after {_mb(received)}" if received else ""
        return OfflineError(f"cannot reach {host}{after}: {reason}",
                            hint="check the network or the proxy (https_proxy); offline, install from a pack: "
                                 "`medseg models pack` on a connected machine, `medseg models install FILE` here")
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return DownloadError(f"{host} stopped answering", hint="run the install again: it resumes where it stopped")
    return DownloadError(f"the download from {host} failed: {reason}",
                         hint="run the install again: it resumes where it stopped")


def _server_status(error: urllib.error.HTTPError) -> str | None:
    """The 'status' word of a short JSON error body (TotalSegmentator's backend says "invalid_license")."""
    try:
        body = json.loads(error.read(4096).decode("utf-8"))
    except (OSError, ValueError, AttributeError):
        return None
    status = body.get("status") if isinstance(body, dict) else None
    return status if isinstance(status, str) and re.fullmatch(r"[A-Za-z0-9_ .-]{1,60}", status) else None


def _status_hint(code: int) -> str:
    if code == 404:
        return "the publisher no longer serves this file; update medseg's catalogue"
    if code in (401, 403):
        return "the server refused it; licensed weights come from their publisher, install the file you received"
    if code == 407:
        return "the proxy needs credentials (https_proxy=http://user:password@host:port)"
    return "try again later"


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.1f} MB"
