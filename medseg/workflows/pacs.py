"""PACS use cases: keep the servers, check one, find studies, retrieve series into the cache, send results.

``medseg pacs ...``, ``medseg batch`` (cases named by a study on a server) and the PACS browser ask
here; the protocols (DICOMweb, DIMSE), the settings file, the keyring and the cache are
:mod:`medseg.io.pacs`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from medseg.progress import CancelToken, ProgressCallback


@dataclass(frozen=True)
class ServerOptions:
    """A server named on the command line instead of a saved one: ``url`` (DICOMweb) or ``host`` (DIMSE)."""

    url: str | None = None
    host: str | None = None
    port: int | None = None
    aet: str | None = None  # the PACS's AE title (DIMSE)
    our_aet: str | None = None
    storage_port: int | None = None
    retrieve: str | None = None  # DIMSE: how series come back (C-GET / C-MOVE)
    tls: bool = False
    user: str | None = None
    bearer: bool = False
    ca_file: str | None = None
    timeout_s: float | None = None

    @property
    def given(self) -> bool:
        return bool(self.url or self.host)


def server_from_options(options: ServerOptions, name: str = "command line") -> Any:
    """The PacsServer the options describe (refused, in words, when they contradict or lack something)."""
    from medseg.io.pacs import PacsError, PacsServer

    if options.url and options.host:
        raise PacsError("give either --url (DICOMweb) or --host (DIMSE), not both")
    common: dict[str, Any] = {"name": name, "ca_file": options.ca_file or ""}
    if options.timeout_s:
        common["timeout_s"] = options.timeout_s
    if options.url:
        auth = "bearer" if options.bearer else ("basic" if options.user else "none")
        return PacsServer(protocol="dicomweb", url=options.url, auth=auth, username=options.user or "", **common)
    if not options.aet:
        raise PacsError("--host needs --aet (the PACS's AE title)")
    extra = {k: v for k, v in (("our_aet", options.our_aet), ("storage_port", options.storage_port),
                               ("retrieve", options.retrieve)) if v}
    return PacsServer(protocol="dimse", host=options.host, port=options.port, called_aet=options.aet,
                      tls=options.tls, **common, **extra)


def find_server(name: str | None, options: ServerOptions | None = None) -> Any:
    """The server the options describe, else the saved one called ``name``."""
    from medseg.io.pacs import PacsError, load_settings

    if options is not None and options.given:
        return server_from_options(options)
    if not name:
        raise PacsError("no server given", hint="name a saved server (`medseg pacs servers`) or give --url / --host")
    return load_settings().server(name)


def saved_servers() -> tuple[list[Any], Path]:
    """The saved servers and the settings file they are kept in."""
    from medseg.io.pacs import load_settings, settings_path

    return list(load_settings().servers), settings_path()


def save_server(server: Any, secret: str | None = None) -> Path:
    """Save (or replace) a server; its password or token goes to the OS keyring. The settings file."""
    from medseg.io.pacs import load_settings, save_settings, settings_path, store_secret

    settings = load_settings()
    settings.put(server)
    save_settings(settings)
    if secret is not None:
        store_secret(server, secret)
    return settings_path()


def remove_server(name: str) -> None:
    """Forget a saved server and its secret."""
    from medseg.io.pacs import delete_secret, load_settings, save_settings

    settings = load_settings()
    server = settings.server(name)
    settings.remove(name)
    save_settings(settings)
    delete_secret(server)


def echo_server(server: Any) -> str:
    """C-ECHO / a DICOMweb probe: what the server answered, in words."""
    from medseg.io.pacs import echo

    return echo(server)


def query_filters(**fields: Any) -> Any:
    """The study filters (medseg.io.pacs.QueryFilters: patient_id, patient_name, birth_date, date_from, date_to,
    modality, accession_number, description)."""
    from medseg.io.pacs import QueryFilters

    return QueryFilters(**fields)


@dataclass
class StudyQuery:
    page: Any  # medseg.io.pacs.QueryPage: studies, offset, more
    series: dict[str, list[Any]]  # study UID -> its series (when asked for)


def find_studies(server: Any, filters: Any, limit: int | None = None, offset: int = 0,
                 with_series: bool = False) -> StudyQuery:
    from medseg.io.pacs import query_series, query_studies

    page = query_studies(server, filters, limit=limit, offset=offset)
    series = {s.study_uid: query_series(server, s.study_uid) for s in page.studies} if with_series else {}
    return StudyQuery(page, series)


def study_series(server: Any, study_uid: str) -> list[Any]:
    """The series of a study on ``server`` (a PacsServer, or the name of a saved one)."""
    from medseg.io.pacs import load_settings, query_series

    if isinstance(server, str):
        server = load_settings().server(server)
    return query_series(server, study_uid)


def retrieve_study(server: Any, study_uid: str, folder: str | os.PathLike, series_uids: Sequence[str] | None = None,
                   method: str | None = None, progress: ProgressCallback | None = None) -> Iterator[Any]:
    """Retrieve a study's series (all, or ``series_uids``) into the cache at ``folder``, one RetrieveResult per
    series as each arrives; a series already complete there is not fetched again."""
    from medseg.io.pacs import PacsError, SeriesCache, query_series, retrieve_series

    counts = {s.series_uid: s.instance_count for s in query_series(server, study_uid)}
    wanted = list(series_uids or counts)
    if not wanted:
        raise PacsError(f"{server.name} lists no series for study {study_uid}")
    cache = SeriesCache(folder)
    for series_uid in wanted:
        yield retrieve_series(server, study_uid, series_uid, cache, method=method,
                              instance_count=counts.get(series_uid), progress=progress)


def retrieve_saved_series(server_name: str, study_uid: str, series_uid: str, cache_folder: str | os.PathLike | None,
                          cancel: CancelToken | None = None) -> Path:
    """One series from a saved server into the cache (``cache_folder``, default the settings' own), its folder."""
    from medseg.io.pacs import SeriesCache, load_settings, retrieve_series

    settings = load_settings()
    cache = SeriesCache(cache_folder or settings.cache_path(), limit_mb=settings.cache_limit_mb)
    result = retrieve_series(settings.server(server_name), study_uid, series_uid, cache, cancel=cancel)
    return Path(result.folder)


def send(server: Any, files: Sequence[str | os.PathLike]) -> list[Any]:
    """Send DICOM files (e.g. a DICOM SEG) by STOW-RS or C-STORE; one SendResult per file. ``server``: a
    PacsServer, or a function that finds it (called once the files are known to be there)."""
    from medseg.io.pacs import PacsError, send_files

    if not files:
        raise PacsError("no files to send", hint="medseg pacs send SERVER FILES...")
    return send_files(server() if callable(server) else server, list(files))


def pacs_error(message: str, hint: str | None = None) -> Exception:
    """The PACS error type, for an interface's own refusals (a wrong number of arguments)."""
    from medseg.io.pacs import PacsError

    return PacsError(message, hint=hint) if hint else PacsError(message)


__all__ = ["ServerOptions", "server_from_options", "find_server", "saved_servers", "save_server", "remove_server",
           "echo_server", "query_filters", "StudyQuery", "find_studies", "study_series", "retrieve_study",
           "retrieve_saved_series", "send", "pacs_error"]
