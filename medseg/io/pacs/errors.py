"""The PACS error: one MedsegError subclass whose message names the server and what to check."""

from __future__ import annotations

from medseg.errors import MedsegError


class PacsError(MedsegError):
    """A PACS could not be reached, refused us, timed out or sent something unusable."""


class PacsAuthError(PacsError):
    """The server refused our credentials (HTTP 401/403) or our AE title."""


class CredentialStoreError(PacsError):
    """No OS keyring is available to keep a password or token."""
