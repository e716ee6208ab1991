"""PACS server records and the settings file that keeps them.

The settings are JSON in medseg's per-user config folder (``pacs.json``), written with the
one atomic write. Passwords and tokens never go there: they live in the OS keyring
(:mod:`medseg.io.pacs.credentials`); the record only says which kind of login it uses.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from urllib.parse import urlparse

from medseg import app_dirs
from medseg.io.atomic import atomic_write_text
from medseg.io.pacs.errors import PacsError

PROTOCOLS = ("dicomweb", "dimse")
AUTH_KINDS = ("none", "basic", "bearer")
SETTINGS_NAME = "pacs.json"
SETTINGS_VERSION = 1
DEFAULT_CACHE_LIMIT_MB = 20_000


@dataclass
class PacsServer:
    """One PACS as the user configured it. No secret is ever stored in this record."""

    name: str
    protocol: str = "dimse"  # "dicomweb" | "dimse"
    url: str = ""  # DICOMweb root, e.g. https://pacs.example.org/dicom-web
    host: str = ""  # DIMSE
    port: int = 104
    called_aet: str = ""  # the PACS's AE title
    our_aet: str = "MEDSEG"  # our AE title (calling AE, and C-MOVE destination)
    storage_port: int = 11112  # our storage SCP's port for C-MOVE
    retrieve: str = "get"  # DIMSE retrieval: "get" (C-GET) or "move" (C-MOVE to our storage SCP)
    tls: bool = False
    ca_file: str = ""  # PEM bundle that signs the server's certificate ("" = system store)
    auth: str = "none"  # "none" | "basic" | "bearer" (DICOMweb)
    username: str = ""  # for basic auth; the password is in the keyring
    timeout_s: float = 20.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        where = f"PACS server '{self.name}'"
        if not self.name.strip():
            raise PacsError("a PACS server needs a name")
        if self.protocol not in PROTOCOLS:
            raise PacsError(f"{where}: unknown protocol '{self.protocol}'", hint="use dicomweb or dimse")
        if self.auth not in AUTH_KINDS:
            raise PacsError(f"{where}: unknown login kind '{self.auth}'", hint="use none, basic or bearer")
        if self.retrieve not in ("get", "move"):
            raise PacsError(f"{where}: unknown retrieval '{self.retrieve}'", hint="use get or move")
        if self.protocol == "dicomweb":
            parsed = urlparse(self.url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise PacsError(f"{where}: '{self.url}' is not a DICOMweb URL",
                                hint="give the service root, e.g. https://pacs.example.org/dicom-web")
        else:
            if not self.host:
                raise PacsError(f"{where}: no host given")
            for label, port in (("port", self.port), ("storage port", self.storage_port)):
                if not 0 < int(port) < 65536:
                    raise PacsError(f"{where}: {label} {port} is not a TCP port (1-65535)")
            for label, aet in (("called AE title", self.called_aet), ("our AE title", self.our_aet)):
                if not aet or len(aet) > 16 or "\\" in aet or not aet.isascii():
                    raise PacsError(f"{where}: {label} '{aet}' is not a valid AE title",
                                    hint="1-16 ASCII characters, no backslash")
        if self.timeout_s <= 0:
            raise PacsError(f"{where}: timeout must be positive")

    @property
    def tls_active(self) -> bool:
        return self.tls or (self.protocol == "dicomweb" and self.url.lower().startswith("https:"))

    def describe(self) -> str:
        if self.protocol == "dicomweb":
            return f"{self.name} (DICOMweb {self.url})"
        return f"{self.name} (DIMSE {self.called_aet}@{self.host}:{self.port}{' TLS' if self.tls else ''})"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "PacsServer":
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or "name" not in data:
            raise PacsError("a PACS server entry in the settings has no name")
        return cls(**{k: v for k, v in data.items() if k in known})


def config_dir() -> Path:
    """medseg's per-user config folder ($MEDSEG_CONFIG_DIR, else the platform's): see medseg.app_dirs."""
    return app_dirs.config_dir()


@dataclass
class PacsSettings:
    servers: list[PacsServer] = field(default_factory=list)
    cache_dir: str = ""  # "" = medseg's cache folder / pacs
    cache_limit_mb: int = DEFAULT_CACHE_LIMIT_MB

    def server(self, name: str) -> PacsServer:
        for server in self.servers:
            if server.name == name:
                return server
        known = ", ".join(s.name for s in self.servers) or "none configured"
        raise PacsError(f"no PACS server named '{name}' in the settings ({known})",
                        hint="add it in File > PACS, or give --url / --host --port --aet")

    def put(self, server: PacsServer) -> None:
        """Add ``server`` or replace the one with the same name."""
        self.servers = [s for s in self.servers if s.name != server.name] + [server]

    def remove(self, name: str) -> None:
        self.servers = [s for s in self.servers if s.name != name]

    def cache_path(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir).expanduser()
        from medseg.io.phantom import cache_root  # medseg's one per-user cache folder

        return cache_root() / "pacs"


def settings_path() -> Path:
    return config_dir() / SETTINGS_NAME


def load_settings(path: str | os.PathLike | None = None) -> PacsSettings:
    """The saved settings; defaults when the file does not exist yet."""
    path = Path(path) if path is not None else settings_path()
    if not path.exists():
        return PacsSettings()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        servers = [PacsServer.from_json(entry) for entry in data.get("servers", [])]
        return PacsSettings(servers=servers, cache_dir=str(data.get("cache_dir", "")),
                            cache_limit_mb=int(data.get("cache_limit_mb", DEFAULT_CACHE_LIMIT_MB)))
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise PacsError(f"cannot read the PACS settings ({error})", path=path,
                        hint="fix or delete the file; it holds no passwords") from error


def save_settings(settings: PacsSettings, path: str | os.PathLike | None = None) -> Path:
    path = Path(path) if path is not None else settings_path()
    for server in settings.servers:
        server.validate()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"version": SETTINGS_VERSION, "servers": [s.to_json() for s in settings.servers],
            "cache_dir": settings.cache_dir, "cache_limit_mb": settings.cache_limit_mb}
    return atomic_write_text(path, json.dumps(data, indent=1))
