"""Passwords and tokens for PACS servers, kept in the OS keyring (the ``keyring`` package).

Never in the settings file, never in a log. Where no keyring backend exists (a headless
Linux box without Secret Service), storing fails with a clear error and the secret can be
given for one session through the environment (``MEDSEG_PACS_PASSWORD`` /
``MEDSEG_PACS_TOKEN``) or passed in memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from medseg.io.pacs.errors import CredentialStoreError, PacsError
from medseg.io.pacs.servers import PacsServer

SERVICE = "medseg-pacs"
ENV_PASSWORD = "MEDSEG_PACS_PASSWORD"
ENV_TOKEN = "MEDSEG_PACS_TOKEN"
NO_KEYRING_HINT = (f"no OS keyring is available on this machine; give the secret for this session in "
                   f"${ENV_PASSWORD} (basic) or ${ENV_TOKEN} (bearer), or install a keyring service "
                   f"(GNOME Keyring / KWallet)")


@dataclass(frozen=True)
class Credentials:
    kind: str  # "basic" | "bearer"
    username: str = ""
    secret: str = ""

    def __repr__(self) -> str:  # never show the secret in a traceback or a log
        return f"Credentials(kind={self.kind!r}, username={self.username!r}, secret=***)"


def _keyring():
    import keyring
    from keyring.backends import fail

    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring):
        return None
    return keyring


def keyring_available() -> bool:
    return _keyring() is not None


def store_secret(server: PacsServer, secret: str) -> None:
    """Keep ``server``'s password or token in the OS keyring."""
    ring = _keyring()
    if ring is None:
        raise CredentialStoreError(f"cannot store the secret for PACS server '{server.name}'", hint=NO_KEYRING_HINT)
    try:
        ring.set_password(SERVICE, server.name, secret)
    except Exception as error:  # keyring backends raise their own types
        raise CredentialStoreError(f"the OS keyring refused to store the secret for '{server.name}' "
                                   f"({type(error).__name__})", hint=NO_KEYRING_HINT) from error


def delete_secret(server: PacsServer) -> None:
    ring = _keyring()
    if ring is None:
        return
    try:
        ring.delete_password(SERVICE, server.name)
    except Exception:  # noqa: BLE001 - nothing stored: nothing to delete
        pass


def credentials_for(server: PacsServer) -> Credentials | None:
    """The credentials to use for ``server``: environment first (one session), then the keyring."""
    if server.auth == "none":
        return None
    env = os.environ.get(ENV_TOKEN if server.auth == "bearer" else ENV_PASSWORD)
    secret = env
    if secret is None:
        ring = _keyring()
        if ring is None:
            raise CredentialStoreError(f"PACS server '{server.name}' needs a {server.auth} login but no secret "
                                       "is available", hint=NO_KEYRING_HINT)
        try:
            secret = ring.get_password(SERVICE, server.name)
        except Exception as error:
            raise CredentialStoreError(f"cannot read the secret for '{server.name}' from the OS keyring "
                                       f"({type(error).__name__})", hint=NO_KEYRING_HINT) from error
    if secret is None:
        raise PacsError(f"PACS server '{server.name}' needs a {server.auth} login but none is stored",
                        hint="enter it in File > PACS (it is kept in the OS keyring)")
    return Credentials(kind=server.auth, username=server.username, secret=secret)
