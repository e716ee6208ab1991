"""DICOMweb through dicomweb-client: QIDO-RS queries, WADO-RS retrieval, STOW-RS sending.

Failures of the HTTP layer (refused connection, TLS, 401/403, timeouts) are turned into
:class:`PacsError` messages naming the server and what to check; no URL parameters (which
may carry patient IDs) go into the message.
"""

from __future__ import annotations

import io
import logging
import os
from contextlib import contextmanager
from typing import Callable, Iterator

from pydicom import dcmread

from medseg.io.pacs.credentials import Credentials
from medseg.io.pacs.errors import PacsAuthError, PacsError
from medseg.io.pacs.records import QueryFilters, SendResult, SeriesRecord, StudyRecord
from medseg.io.pacs.servers import PacsServer
from medseg.progress import CancelToken

logging.getLogger("dicomweb_client").setLevel(logging.WARNING)  # its debug lines carry query URLs (patient IDs)

# Ask for every instance as stored: no transcoding on the server, byte-identical files.
AS_STORED = (("application/dicom", "*"),)
STUDY_FIELDS = ["StudyInstanceUID", "PatientID", "PatientName", "PatientBirthDate", "StudyDate", "StudyDescription",
                "AccessionNumber", "ModalitiesInStudy", "NumberOfStudyRelatedSeries", "NumberOfStudyRelatedInstances"]
SERIES_FIELDS = ["SeriesInstanceUID", "Modality", "SeriesNumber", "SeriesDescription", "NumberOfSeriesRelatedInstances"]


def _client_class():
    from urllib.parse import urlencode

    from dicomweb_client.api import DICOMwebClient

    class Client(DICOMwebClient):
        """Keeps ``*`` wildcards literal in query strings: requests encodes them as %2A, which
        some servers (Orthanc 1.10) do not decode, so "SMITH*" silently matched nothing."""

        def _http_get(self, url, params=None, headers=None, stream=False):
            if params:
                url = f"{url}{'&' if '?' in url else '?'}{urlencode(params, doseq=True, safe='*,')}"
            return super()._http_get(url, params=None, headers=headers, stream=stream)

        def _http_get_multipart_application_dicom(self, url, media_types=None, params=None, stream=False):
            """The parts as the server sent them (bytes), not parsed and re-encoded by pydicom:
            re-encoding cost 17 ms per CT slice, more than its transfer. (Overrides a private
            method of dicomweb-client, pinned in pyproject.toml; iter_series and
            retrieve_instance hand its items through unchanged.)"""
            accept = self._build_multipart_accept_header_field_value(
                media_types or AS_STORED, {"1.2.840.10008.1.2.1": "application/dicom"})
            response = self._http_get(url, params=params, headers={"Accept": accept}, stream=stream)
            if response.headers.get("Content-Type", "").startswith("application/dicom"):
                return iter([response.content])  # a single part sent without the multipart envelope
            return self._decode_multipart_message(response, stream=stream)

    return Client


def client(server: PacsServer, credentials: Credentials | None):
    import requests

    class Session(requests.Session):
        """A CA file set for the server wins: plain requests lets $REQUESTS_CA_BUNDLE override a
        session's ``verify``, so the PACS's own CA was silently ignored where that is set."""

        def merge_environment_settings(self, url, proxies, stream, verify, cert):
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if server.ca_file:
                settings["verify"] = server.ca_file
            return settings

    if server.ca_file and not os.access(server.ca_file, os.R_OK):
        raise PacsError("cannot read the CA file", path=server.ca_file, hint="choose the PEM file of the PACS's CA")
    session = Session()
    headers = {}
    if credentials is not None:
        if credentials.kind == "basic":
            session.auth = (credentials.username, credentials.secret)
        else:
            headers["Authorization"] = f"Bearer {credentials.secret}"
    web = _client_class()(server.url, session=session, headers=headers or None, timeout=server.timeout_s)
    web.set_http_retry_params(retry=False)  # fail fast with our message; the user retries
    return web


@contextmanager
def http_errors(server: PacsServer, doing: str) -> Iterator[None]:
    import requests

    try:
        yield
    except requests.exceptions.SSLError as error:
        text = str(error)
        if "CERTIFICATE_VERIFY_FAILED" in text:
            raise PacsError(f"{server.name}: the server's TLS certificate is not trusted while {doing}",
                            hint="choose the CA file that signed the PACS's certificate") from None
        raise PacsError(f"{server.name}: TLS handshake failed while {doing}",
                        hint="the server may not use https on this port; check the URL's http/https") from None
    except requests.exceptions.ConnectTimeout:
        raise PacsError(f"{server.name}: no answer within {server.timeout_s:g} s while {doing}",
                        hint="check the URL and that the PACS is running") from None
    except requests.exceptions.ReadTimeout:
        raise PacsError(f"{server.name}: the server stopped answering for {server.timeout_s:g} s while {doing}",
                        hint="the PACS is slow or stopped; try again (a retrieval resumes where it stopped)") from None
    except requests.exceptions.ChunkedEncodingError:
        raise PacsError(f"{server.name}: the connection was lost while {doing}",
                        hint="the PACS stopped or the network failed; try again (a retrieval resumes where it stopped)") from None
    except requests.exceptions.ConnectionError as error:
        refused = "refused" in str(error).lower()
        what = "nothing is listening at" if refused else "the connection failed or was lost with"
        raise PacsError(f"{server.name}: {what} {server.url} while {doing}",
                        hint="check the URL and that the PACS is running; a retrieval resumes where it stopped") from None
    except requests.exceptions.HTTPError as error:
        code = error.response.status_code if error.response is not None else 0
        if code in (401, 403):
            raise PacsAuthError(f"{server.name}: the server refused our login (HTTP {code}) while {doing}",
                                hint="check the user name and password/token (File > PACS)") from None
        raise PacsError(f"{server.name}: HTTP {code} while {doing}",
                        hint="the URL may not be the DICOMweb root (e.g. .../dicom-web)") from None
    except OSError as error:  # e.g. the CA file cannot be read
        raise PacsError(f"{server.name}: {error.strerror or error} while {doing}", path=getattr(error, "filename", None),
                        hint="check the CA file") from None
    except (requests.exceptions.RequestException, ValueError) as error:
        raise PacsError(f"{server.name}: {type(error).__name__} while {doing}") from None


def _value(item: dict, keyword: str) -> str:
    from pydicom.datadict import tag_for_keyword

    entry = item.get(f"{tag_for_keyword(keyword):08X}", {})
    values = entry.get("Value") or []
    if not values:
        return ""
    first = values[0]
    if isinstance(first, dict):  # person name
        return str(first.get("Alphabetic", ""))
    return str(first)


def _all(item: dict, keyword: str) -> tuple[str, ...]:
    from pydicom.datadict import tag_for_keyword

    return tuple(str(v) for v in item.get(f"{tag_for_keyword(keyword):08X}", {}).get("Value") or ())


def _int(item: dict, keyword: str) -> int | None:
    text = _value(item, keyword)
    return int(text) if text.strip().lstrip("-").isdigit() else None


def echo(server: PacsServer, credentials: Credentials | None) -> str:
    web = client(server, credentials)
    with http_errors(server, "testing the connection"):
        web.search_for_studies(limit=1, fields=["StudyInstanceUID"])
    return f"QIDO-RS OK ({server.url})"


def find_studies(server: PacsServer, credentials: Credentials | None, filters: QueryFilters, limit: int,
                 offset: int) -> tuple[list[StudyRecord], bool]:
    web = client(server, credentials)
    search = dict(filters.keywords())
    with http_errors(server, "searching for studies"):
        found = web.search_for_studies(fields=STUDY_FIELDS, search_filters=search, limit=limit + 1, offset=offset,
                                       fuzzymatching=False)
    studies = [StudyRecord(
        study_uid=_value(i, "StudyInstanceUID"), patient_id=_value(i, "PatientID"), patient_name=_value(i, "PatientName"),
        birth_date=_value(i, "PatientBirthDate"), study_date=_value(i, "StudyDate"),
        description=_value(i, "StudyDescription"), accession_number=_value(i, "AccessionNumber"),
        modalities=_all(i, "ModalitiesInStudy"), series_count=_int(i, "NumberOfStudyRelatedSeries"),
        instance_count=_int(i, "NumberOfStudyRelatedInstances")) for i in found]
    return studies[:limit], len(studies) > limit


def find_series(server: PacsServer, credentials: Credentials | None, study_uid: str) -> list[SeriesRecord]:
    web = client(server, credentials)
    with http_errors(server, "listing the series of a study"):
        found = web.search_for_series(study_instance_uid=study_uid, fields=SERIES_FIELDS)
    return [SeriesRecord(study_uid=study_uid, series_uid=_value(i, "SeriesInstanceUID"), modality=_value(i, "Modality"),
                         number=_value(i, "SeriesNumber"), description=_value(i, "SeriesDescription"),
                         instance_count=_int(i, "NumberOfSeriesRelatedInstances")) for i in found]


def find_instances(server: PacsServer, credentials: Credentials | None, study_uid: str, series_uid: str) -> list[str]:
    web = client(server, credentials)
    with http_errors(server, "listing the instances of a series"):
        found = web.search_for_instances(study_instance_uid=study_uid, series_instance_uid=series_uid,
                                         fields=["SOPInstanceUID"])
    return [_value(i, "SOPInstanceUID") for i in found]


def _sop_uid(part: bytes) -> str:
    ds = dcmread(io.BytesIO(part), stop_before_pixels=True, specific_tags=["SOPInstanceUID"])
    return str(ds.SOPInstanceUID)


def retrieve(server: PacsServer, credentials: Credentials | None, study_uid: str, series_uid: str,
             sop_uids: list[str] | None, sink: Callable[[str, bytes], None], cancel: CancelToken | None = None) -> None:
    """WADO-RS: the whole series in one streamed multipart response, or just ``sop_uids`` one by one."""
    web = client(server, credentials)
    with http_errors(server, "retrieving a series"):
        if sop_uids is None:
            for part in web.iter_series(study_uid, series_uid, media_types=AS_STORED):
                if cancel is not None:
                    cancel.raise_if_cancelled()
                sink(_sop_uid(part), part)
        else:
            for sop_uid in sop_uids:
                if cancel is not None:
                    cancel.raise_if_cancelled()
                part = web.retrieve_instance(study_uid, series_uid, sop_uid, media_types=AS_STORED)
                sink(_sop_uid(part), part)


def store(server: PacsServer, credentials: Credentials | None, paths: list, cancel: CancelToken | None = None,
          on_result: Callable[[SendResult], None] | None = None) -> list[SendResult]:
    """STOW-RS, one request per file so that each gets its own answer."""
    web = client(server, credentials)
    results: list[SendResult] = []
    for path in paths:
        if cancel is not None:
            cancel.raise_if_cancelled()
        try:
            ds = dcmread(path)
        except Exception as error:
            raise PacsError(f"not a DICOM file that can be sent ({type(error).__name__}: {error})", path=path) from error
        with http_errors(server, "sending"):
            answer = web.store_instances([ds])
        failed = answer.get("FailedSOPSequence") or []
        reason = ""
        if failed:
            reason = f"failure reason 0x{int(failed[0].get('FailureReason', 0)):04X}"
        result = SendResult(str(path), str(ds.SOPInstanceUID), ok=not failed, status=reason or "stored")
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
