"""PACS: find studies, retrieve series into a local cache, send results back.

Two protocols behind one front (:mod:`medseg.io.pacs.client`): DICOMweb (QIDO-RS, WADO-RS,
STOW-RS via dicomweb-client) and DIMSE (C-ECHO, C-FIND, C-GET, C-MOVE to our own storage
SCP, C-STORE via pynetdicom). Server records and the settings file are in
:mod:`~medseg.io.pacs.servers`, secrets in the OS keyring (:mod:`~medseg.io.pacs.credentials`),
the cache with its completion markers in :mod:`~medseg.io.pacs.cache`. No Qt here.
"""

from medseg.io.pacs.cache import SeriesCache
from medseg.io.pacs.client import echo, list_instances, query_series, query_studies, retrieve_series, send_files
from medseg.io.pacs.credentials import Credentials, credentials_for, delete_secret, keyring_available, store_secret
from medseg.io.pacs.errors import CredentialStoreError, PacsAuthError, PacsError
from medseg.io.pacs.records import QueryFilters, QueryPage, RetrieveResult, SendResult, SeriesRecord, StudyRecord
from medseg.io.pacs.servers import PacsServer, PacsSettings, load_settings, save_settings, settings_path

__all__ = [
    "CredentialStoreError", "Credentials", "PacsAuthError", "PacsError", "PacsServer", "PacsSettings", "QueryFilters",
    "QueryPage", "RetrieveResult", "SendResult", "SeriesCache", "SeriesRecord", "StudyRecord", "credentials_for",
    "delete_secret", "echo", "keyring_available", "list_instances", "load_settings", "query_series", "query_studies",
    "retrieve_series", "save_settings", "send_files", "settings_path", "store_secret",
]
