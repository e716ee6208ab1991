"""DIMSE (classic DICOM networking) through pynetdicom: C-ECHO, C-FIND, C-GET, C-MOVE, C-STORE.

Every association is opened by :func:`_associate`, which first checks the TCP (and TLS)
connection itself so that "nothing listens on that port", "the server does not speak TLS"
and "the PACS refused our AE title" come out as three different messages.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from pydicom import dcmread
from pydicom.dataset import Dataset
from pydicom.errors import InvalidDicomError
from pydicom.uid import (
    JPEG2000,
    UID,
    DeflatedExplicitVRLittleEndian,
    ExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
    JPEG2000Lossless,
    JPEGBaseline8Bit,
    JPEGExtended12Bit,
    JPEGLosslessSV1,
    JPEGLSLossless,
    JPEGLSNearLossless,
    RLELossless,
)

from medseg.io.pacs.errors import PacsAuthError, PacsError
from medseg.io.pacs.records import QueryFilters, SendResult, SeriesRecord, StudyRecord
from medseg.io.pacs.servers import PacsServer
from medseg.progress import CancelToken

log = logging.getLogger(__name__)

STUDY_FIND = UID("1.2.840.10008.5.1.4.1.2.2.1")
STUDY_GET = UID("1.2.840.10008.5.1.4.1.2.2.3")
STUDY_MOVE = UID("1.2.840.10008.5.1.4.1.2.2.2")
VERIFICATION = UID("1.2.840.10008.1.1")

# Storage classes a CT segmentation workflow retrieves (C-GET must name them up front).
RETRIEVE_STORAGE_CLASSES = [
    UID("1.2.840.10008.5.1.4.1.1.2"),  # CT Image
    UID("1.2.840.10008.5.1.4.1.1.2.1"),  # Enhanced CT Image
    UID("1.2.840.10008.5.1.4.1.1.4"),  # MR Image
    UID("1.2.840.10008.5.1.4.1.1.4.1"),  # Enhanced MR Image
    UID("1.2.840.10008.5.1.4.1.1.128"),  # PET Image
    UID("1.2.840.10008.5.1.4.1.1.66.4"),  # Segmentation
    UID("1.2.840.10008.5.1.4.1.1.7"),  # Secondary Capture
    UID("1.2.840.10008.5.1.4.1.1.481.3"),  # RT Structure Set
]
# Offered one per context so the PACS sends each file as stored instead of transcoding it.
TRANSFER_SYNTAXES = [ExplicitVRLittleEndian, ImplicitVRLittleEndian, JPEG2000Lossless, JPEGLosslessSV1,
                     JPEGLSLossless, RLELossless, JPEG2000, JPEGBaseline8Bit, JPEGExtended12Bit,
                     JPEGLSNearLossless, DeflatedExplicitVRLittleEndian]
FIND_PAGE_MARGIN = 1  # one match past the page tells whether a next page exists

for _name in ("pynetdicom", "pynetdicom.assoc", "pynetdicom.acse", "pynetdicom.events", "pynetdicom.dul"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)  # its debug lines carry patient data


def _tls_context(server: PacsServer) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=server.ca_file or None)
    except (OSError, ssl.SSLError) as error:
        raise PacsError(f"cannot read the CA file ({error})", path=server.ca_file or None) from error


def _probe(server: PacsServer) -> None:
    """Connect (and shake hands, with TLS) once, to name the failure precisely."""
    where = f"{server.host}:{server.port}"
    try:
        sock = socket.create_connection((server.host, server.port), timeout=server.timeout_s)
    except ConnectionRefusedError as error:
        raise PacsError(f"{server.name}: nothing is listening on {where}",
                        hint="check the host and port, and that the PACS is running") from error
    except TimeoutError as error:
        raise PacsError(f"{server.name}: no answer from {where} within {server.timeout_s:g} s",
                        hint="check the host, port and firewall") from error
    except OSError as error:
        raise PacsError(f"{server.name}: cannot connect to {where} ({error.strerror or error})",
                        hint="check the host and port") from error
    try:
        if server.tls:
            try:
                with _tls_context(server).wrap_socket(sock, server_hostname=server.host) as tls_sock:
                    tls_sock.settimeout(server.timeout_s)
            except ssl.SSLCertVerificationError as error:
                raise PacsError(f"{server.name}: the server's TLS certificate is not trusted ({error.verify_message})",
                                hint="choose the CA file that signed the PACS's certificate") from error
            except (ssl.SSLError, OSError) as error:
                raise PacsError(f"{server.name}: TLS handshake with {where} failed ({error})",
                                hint="the server may not use TLS on this port; switch TLS off or use its TLS port") from error
    finally:
        sock.close()


def _application_entity(server: PacsServer):
    from pynetdicom import AE

    ae = AE(ae_title=server.our_aet)
    ae.acse_timeout = server.timeout_s
    ae.dimse_timeout = server.timeout_s
    ae.network_timeout = server.timeout_s
    ae.connection_timeout = server.timeout_s
    ae.maximum_pdu_size = 0  # no limit: fewer, larger PDUs on fast links
    return ae


def _check_established(server: PacsServer, assoc, started: float, rejection: list) -> None:
    if assoc.is_established:
        return
    titles = f"called AE '{server.called_aet}', our AE '{server.our_aet}'"
    if time.monotonic() - started >= server.timeout_s * 0.95:
        raise PacsError(f"{server.name}: no answer to our association request within {server.timeout_s:g} s",
                        hint="the PACS is overloaded or stopped; try again later or raise the timeout")
    if rejection:  # what assoc.is_rejected would say, without its race (see _rejection_recorder)
        raise PacsAuthError(f"{server.name} refused the association ({titles}): {rejection[0].reason_str}",
                            hint="check the PACS's AE title, and that our AE title is registered in the PACS")
    raise PacsError(f"{server.name}: the association with {server.host}:{server.port} failed ({titles})",
                    hint="the PACS ended it at once: check that our AE title is registered in the PACS, "
                         "and whether this port needs TLS")


def _rejection_recorder(rejection: list) -> tuple:
    """An A-ASSOCIATE-RJ as it arrives, seen by the reader thread.

    Why not only ``assoc.is_rejected``: pynetdicom 3.0.4 sets it in the requesting thread after
    checking that the socket is still connected, and a PACS that closes the connection right
    after its rejection (Orthanc does) can win that race: the association then reads as failed,
    not refused (4 in 600 refusals by Orthanc on loopback).
    """
    from pynetdicom import evt
    from pynetdicom.pdu import A_ASSOCIATE_RJ

    def record(event) -> None:
        if isinstance(event.pdu, A_ASSOCIATE_RJ):
            rejection.append(event.pdu)
    return (evt.EVT_PDU_RECV, record)


@contextmanager
def _associate(server: PacsServer, contexts: list[tuple[UID, list[UID]]], roles=None, handlers=None) -> Iterator:
    _probe(server)
    ae = _application_entity(server)
    for abstract, syntaxes in contexts:
        ae.add_requested_context(abstract, syntaxes)
    tls_args = (_tls_context(server), server.host) if server.tls else None
    rejection: list = []
    started = time.monotonic()
    assoc = ae.associate(server.host, server.port, ae_title=server.called_aet, ext_neg=roles, tls_args=tls_args,
                         evt_handlers=[*(handlers or []), _rejection_recorder(rejection)])
    _check_established(server, assoc, started, rejection)
    try:
        yield assoc
    finally:
        if assoc.is_established:
            assoc.release()


def _status_text(status: Dataset | None) -> str:
    if status is None or "Status" not in status:
        return "no status (connection lost)"
    return f"0x{int(status.Status):04X}"


def _check_lost(server: PacsServer, status: Dataset | None, doing: str) -> None:
    if status is None or "Status" not in status:
        raise PacsError(f"{server.name}: the connection was lost while {doing}",
                        hint=f"no answer within {server.timeout_s:g} s, or the PACS stopped; try again")


def echo(server: PacsServer) -> str:
    with _associate(server, [(VERIFICATION, [ExplicitVRLittleEndian, ImplicitVRLittleEndian])]) as assoc:
        status = assoc.send_c_echo()
    _check_lost(server, status, "waiting for the echo")
    if int(status.Status) != 0:
        raise PacsError(f"{server.name}: C-ECHO answered status {_status_text(status)}")
    return f"C-ECHO OK ({server.called_aet}@{server.host}:{server.port})"


def _find(server: PacsServer, query: Dataset, cancel: CancelToken | None, stop_after: int | None = None) -> list[Dataset]:
    matches: list[Dataset] = []
    with _associate(server, [(STUDY_FIND, [ExplicitVRLittleEndian, ImplicitVRLittleEndian])]) as assoc:
        for status, identifier in assoc.send_c_find(query, STUDY_FIND):
            _check_lost(server, status, "waiting for query results")
            code = int(status.Status)
            if code in (0xFF00, 0xFF01):
                matches.append(identifier)
                if (cancel is not None and cancel.cancelled) or (stop_after is not None and len(matches) >= stop_after):
                    assoc.abort()  # no more needed: abort rather than drain the rest
                    break
            elif code != 0:
                raise PacsError(f"{server.name}: C-FIND failed with status {_status_text(status)}",
                                hint="the PACS may not support one of the filters")
    if cancel is not None:
        cancel.raise_if_cancelled()
    return matches


def _text(ds: Dataset, keyword: str) -> str:
    value = ds.get(keyword, "")
    return "" if value is None else str(value)


def _values(ds: Dataset, keyword: str) -> tuple[str, ...]:
    value = ds.get(keyword)
    if not value:
        return ()
    return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)


def _count(ds: Dataset, keyword: str) -> int | None:
    value = ds.get(keyword)
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def find_studies(server: PacsServer, filters: QueryFilters, limit: int, offset: int,
                 cancel: CancelToken | None = None) -> tuple[list[StudyRecord], bool]:
    query = Dataset()
    query.QueryRetrieveLevel = "STUDY"
    for keyword in ("StudyInstanceUID", "PatientID", "PatientName", "PatientBirthDate", "StudyDate",
                    "StudyDescription", "AccessionNumber", "ModalitiesInStudy",
                    "NumberOfStudyRelatedSeries", "NumberOfStudyRelatedInstances"):
        setattr(query, keyword, "")
    for keyword, value in filters.keywords().items():
        setattr(query, keyword, value)
    matches = _find(server, query, cancel, stop_after=offset + limit + FIND_PAGE_MARGIN)
    studies = [StudyRecord(
        study_uid=_text(m, "StudyInstanceUID"), patient_id=_text(m, "PatientID"), patient_name=_text(m, "PatientName"),
        birth_date=_text(m, "PatientBirthDate"), study_date=_text(m, "StudyDate"),
        description=_text(m, "StudyDescription"), accession_number=_text(m, "AccessionNumber"),
        modalities=_values(m, "ModalitiesInStudy"),
        series_count=_count(m, "NumberOfStudyRelatedSeries"), instance_count=_count(m, "NumberOfStudyRelatedInstances"),
    ) for m in matches]
    # C-FIND has no paging: pages are cut from the server's order, newest first within a page
    page = sorted(studies[offset:offset + limit], key=lambda s: (s.study_date, s.study_uid), reverse=True)
    return page, len(studies) > offset + limit


def find_series(server: PacsServer, study_uid: str, cancel: CancelToken | None = None) -> list[SeriesRecord]:
    query = Dataset()
    query.QueryRetrieveLevel = "SERIES"
    query.StudyInstanceUID = study_uid
    for keyword in ("SeriesInstanceUID", "Modality", "SeriesNumber", "SeriesDescription",
                    "NumberOfSeriesRelatedInstances"):
        setattr(query, keyword, "")
    return [SeriesRecord(study_uid=study_uid, series_uid=_text(m, "SeriesInstanceUID"), modality=_text(m, "Modality"),
                         number=_text(m, "SeriesNumber"), description=_text(m, "SeriesDescription"),
                         instance_count=_count(m, "NumberOfSeriesRelatedInstances"))
            for m in _find(server, query, cancel)]


def find_instances(server: PacsServer, study_uid: str, series_uid: str, cancel: CancelToken | None = None) -> list[str]:
    query = Dataset()
    query.QueryRetrieveLevel = "IMAGE"
    query.StudyInstanceUID = study_uid
    query.SeriesInstanceUID = series_uid
    query.SOPInstanceUID = ""
    return [_text(m, "SOPInstanceUID") for m in _find(server, query, cancel)]


def _retrieve_identifier(study_uid: str, series_uid: str, sop_uids: list[str] | None) -> Dataset:
    ds = Dataset()
    ds.QueryRetrieveLevel = "IMAGE" if sop_uids else "SERIES"
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = series_uid
    if sop_uids:
        ds.SOPInstanceUID = list(sop_uids)
    return ds


InstanceSink = Callable[[str, bytes], None]  # (SOP Instance UID, Part-10 bytes)


def _store_handler(sink: InstanceSink, errors: list[str]):
    def handle(event) -> int:
        try:
            sink(str(event.request.AffectedSOPInstanceUID), event.encoded_dataset(include_meta=True))
        except Exception as error:  # noqa: BLE001 - reported after the transfer, and the store refused
            errors.append(str(error))
            return 0xA700
        return 0x0000

    return handle


def _drive_retrieve(server: PacsServer, responses, assoc, cancel: CancelToken | None, errors: list[str], what: str) -> None:
    for status, _identifier in responses:
        if cancel is not None and cancel.cancelled:
            assoc.abort()
            cancel.raise_if_cancelled()
        _check_lost(server, status, f"retrieving ({what})")
        code = int(status.Status)
        if code in (0xFF00, 0xFF01):
            continue
        if code == 0xA801:
            raise PacsError(f"{server.name}: the PACS does not know our AE title '{server.our_aet}' as a C-MOVE destination",
                            hint="register it in the PACS with our host and storage port, or use C-GET")
        if code not in (0x0000, 0xB000):  # B000: some sub-operations failed, counted by the caller
            raise PacsError(f"{server.name}: {what} failed with status {_status_text(status)}",
                            hint="; ".join(errors[:3]) or "see the PACS's log")
    if errors:
        raise PacsError(f"{len(errors)} received instances could not be stored: {errors[0]}")


def _storage_contexts() -> list[tuple[UID, list[UID]]]:
    return [(sop_class, [syntax]) for sop_class in RETRIEVE_STORAGE_CLASSES for syntax in TRANSFER_SYNTAXES]


def get(server: PacsServer, study_uid: str, series_uid: str, sop_uids: list[str] | None, sink: InstanceSink,
        cancel: CancelToken | None = None) -> None:
    """C-GET the series (or just ``sop_uids``) over one association; each instance goes to ``sink``."""
    from pynetdicom import build_role, evt

    contexts = [(STUDY_GET, [ExplicitVRLittleEndian, ImplicitVRLittleEndian])] + _storage_contexts()
    roles = [build_role(sop_class, scp_role=True) for sop_class in RETRIEVE_STORAGE_CLASSES]
    errors: list[str] = []
    with _associate(server, contexts, roles, [(evt.EVT_C_STORE, _store_handler(sink, errors))]) as assoc:
        identifier = _retrieve_identifier(study_uid, series_uid, sop_uids)
        _drive_retrieve(server, assoc.send_c_get(identifier, STUDY_GET), assoc, cancel, errors, "C-GET")


class StorageSCP:
    """medseg's own storage SCP, listening while a C-MOVE runs."""

    def __init__(self, server: PacsServer, sink: InstanceSink, bind_host: str = ""):
        from pynetdicom import AE, ALL_TRANSFER_SYNTAXES, AllStoragePresentationContexts, evt

        self.errors: list[str] = []
        ae = AE(ae_title=server.our_aet)
        ae.network_timeout = server.timeout_s
        ae.maximum_pdu_size = 0
        for context in AllStoragePresentationContexts:
            ae.add_supported_context(context.abstract_syntax, ALL_TRANSFER_SYNTAXES)
        try:
            self._server = ae.make_server((bind_host, server.storage_port),
                                          evt_handlers=[(evt.EVT_C_STORE, _store_handler(sink, self.errors))])
        except OSError as error:
            raise PacsError(f"cannot listen on our storage port {server.storage_port} ({error.strerror or error})",
                            hint="another program uses it; choose another storage port (and register it in the PACS)") from error
        # our own thread with a short poll: start_server's 0.5 s poll made every C-MOVE wait for it on shutdown
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="medseg-storage-scp", daemon=True)
        self._thread.start()

    def close(self) -> None:
        import socketserver

        # the plain socketserver shutdown: pynetdicom's also unregisters from an AE's
        # start_server list, which make_server never joined
        socketserver.BaseServer.shutdown(self._server)
        self._server.server_close()
        self._thread.join()


def move(server: PacsServer, study_uid: str, series_uid: str, sop_uids: list[str] | None, sink: InstanceSink,
         cancel: CancelToken | None = None) -> None:
    """C-MOVE the series to our own storage SCP, started for the duration of the transfer."""
    scp = StorageSCP(server, sink)
    try:
        with _associate(server, [(STUDY_MOVE, [ExplicitVRLittleEndian, ImplicitVRLittleEndian])]) as assoc:
            identifier = _retrieve_identifier(study_uid, series_uid, sop_uids)
            _drive_retrieve(server, assoc.send_c_move(identifier, server.our_aet, STUDY_MOVE), assoc, cancel,
                            scp.errors, "C-MOVE")
    finally:
        scp.close()


def store(server: PacsServer, paths: list, cancel: CancelToken | None = None,
          on_result: Callable[[SendResult], None] | None = None) -> list[SendResult]:
    """C-STORE each file (sent as stored, no re-encoding); one result per file."""
    headers = []
    for path in paths:
        try:
            ds = dcmread(path, stop_before_pixels=True)
            headers.append((path, UID(ds.SOPClassUID), UID(ds.file_meta.TransferSyntaxUID), str(ds.SOPInstanceUID)))
        except (OSError, InvalidDicomError, AttributeError) as error:
            raise PacsError(f"not a DICOM file that can be sent ({error})", path=path) from error
    contexts: dict[tuple[UID, UID], None] = {(sop_class, syntax): None for _, sop_class, syntax, _ in headers}
    if len(contexts) > 128:
        raise PacsError("too many kinds of DICOM objects to send at once (over 128)", hint="send fewer files")
    results: list[SendResult] = []
    with _associate(server, [(sop_class, [syntax]) for sop_class, syntax in contexts]) as assoc:
        for path, _sop_class, _syntax, sop_uid in headers:
            if cancel is not None:
                cancel.raise_if_cancelled()
            status = assoc.send_c_store(path)
            code = int(status.Status) if status is not None and "Status" in status else None
            result = SendResult(str(path), sop_uid, ok=code in (0x0000, 0xB000, 0xB007, 0xB006),
                                status=_status_text(status))
            results.append(result)
            if on_result is not None:
                on_result(result)
            if code is None:
                raise PacsError(f"{server.name}: the connection was lost after {len(results) - 1} of {len(paths)} files",
                                hint="send again; files already stored are replaced, not duplicated")
    return results
