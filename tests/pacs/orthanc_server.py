"""A real Orthanc (Debian's, with the DICOMweb plugin) for the PACS tests and benchmark.

Orthanc 1.10 cannot bind one address, so it must run inside a private network namespace
whose only interface is ``lo`` (``.ci/pacs-test`` creates one and runs pytest inside it);
:func:`require_private_netns` refuses to start it anywhere else.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

ORTHANC = "/usr/sbin/Orthanc"
DICOMWEB_PLUGIN = "/usr/share/orthanc/plugins/libOrthancDicomWeb.so"
ORTHANC_AET = "ORTHANC"


def require_private_netns() -> str | None:
    """None when this process sees only the loopback interface, else what is wrong."""
    interfaces = sorted(os.listdir("/sys/class/net"))
    if interfaces != ["lo"]:
        return (f"the PACS tests start a real Orthanc, which listens on every interface; they must run inside "
                f"a network namespace with only 'lo' (this one has {interfaces}). Run them with "
                f"`bash .ci/pacs-test` (`make test` does), as root")
    if not os.path.exists(ORTHANC) or not os.path.exists(DICOMWEB_PLUGIN):
        return "Orthanc or its DICOMweb plugin is not installed; run `bash .ci/pacs-deps` as root"
    return None


def _die_with_parent() -> None:
    """In the child before exec: Orthanc gets SIGKILL when the test process dies, however it dies."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def make_certificate(folder: Path, name: str = "pacs") -> tuple[Path, Path, Path]:
    """A self-signed certificate for 127.0.0.1: (certificate, key, certificate+key PEM).
    For DICOM TLS only: Debian's Orthanc 1.10.1 crashes (SIGSEGV) on any HTTPS connection."""
    cert, key, both = folder / f"{name}.crt", folder / f"{name}.key", folder / f"{name}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    both.write_bytes(cert.read_bytes() + key.read_bytes())
    return cert, key, both


class Orthanc:
    def __init__(self, folder: Path, http_port: int = 8042, dicom_port: int = 4242,
                 modalities: dict[str, tuple[str, int]] | None = None, **extra):
        self.folder = Path(folder)
        self.http_port = http_port
        self.dicom_port = dicom_port
        self.users = extra.get("RegisteredUsers") or {}
        (self.folder / "db").mkdir(parents=True, exist_ok=True)
        (self.folder / "log").mkdir(exist_ok=True)
        config = {
            "Name": "MEDSEG-TEST-PACS", "StorageDirectory": str(self.folder / "db"),
            "IndexDirectory": str(self.folder / "db"), "Plugins": [DICOMWEB_PLUGIN],
            "HttpServerEnabled": True, "HttpPort": http_port, "RemoteAccessAllowed": False,
            "AuthenticationEnabled": False, "WebDavEnabled": False, "OrthancExplorerEnabled": False,
            "DicomServerEnabled": True, "DicomAet": ORTHANC_AET, "DicomPort": dicom_port,
            "DicomCheckCalledAet": True, "DicomCheckModalityHost": True,
            "DicomAlwaysAllowEcho": False, "DicomAlwaysAllowStore": False, "DicomAlwaysAllowFind": False,
            "DicomAlwaysAllowGet": False, "DicomAlwaysAllowMove": False,
            "DicomModalities": {name.lower(): [name, "127.0.0.1", port] for name, (_, port) in
                                (modalities or {}).items()},
            "SaveJobs": False, "StorageCompression": False, "OverwriteInstances": True,
            "DicomWeb": {"Enable": True, "Root": "/dicom-web/", "EnableWado": False},
        }
        config.update(extra)
        self.config_path = self.folder / "orthanc.json"
        self.config_path.write_text(json.dumps(config, indent=1))
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def dicomweb_url(self) -> str:
        return f"{self.base_url}/dicom-web"

    def start(self, timeout_s: float = 30.0) -> "Orthanc":
        self.process = subprocess.Popen([ORTHANC, f"--logdir={self.folder / 'log'}", str(self.config_path)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # poll until both servers answer (Orthanc has no readiness signal)
            if self.process.poll() is not None:
                raise RuntimeError(f"Orthanc exited with {self.process.returncode}; see {self.folder / 'log'}")
            try:
                socket.create_connection(("127.0.0.1", self.dicom_port), timeout=1).close()
                self.rest("GET", "/system")
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Orthanc did not start within {timeout_s} s; see {self.folder / 'log'}")

    def stop(self, kill: bool = False) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def rest(self, method: str, path: str, data: bytes | None = None, raw: bool = False):
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        if self.users:
            user, password = next(iter(self.users.items()))
            request.add_header("Authorization", "Basic " + b64encode(f"{user}:{password}".encode()).decode())
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return body if raw else json.loads(body or b"null")

    def upload(self, paths) -> list[dict]:
        return [self.rest("POST", "/instances", Path(p).read_bytes()) for p in paths]

    def instance_file(self, orthanc_id: str) -> bytes:
        return self.rest("GET", f"/instances/{orthanc_id}/file", raw=True)

    def find_instance(self, sop_uid: str) -> str | None:
        found = self.rest("POST", "/tools/lookup", sop_uid.encode())
        for entry in found:
            if entry["Type"] == "Instance":
                return entry["ID"]
        return None


class TlsProxy:
    """HTTPS in front of Orthanc's HTTP port (Orthanc's own HTTPS crashes in this build): a
    thread per connection relays bytes between the TLS client and 127.0.0.1:<target>."""

    def __init__(self, certificate: Path, key: Path, port: int, target: int):
        import ssl
        import threading

        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(str(certificate), str(key))
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", port))
        self.listener.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import threading

        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        import ssl
        import threading

        try:
            client.settimeout(10)
            tls = self.context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.target))

        def pump(source, sink):
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for s in (source, sink):
                    try:
                        s.close()
                    except OSError:
                        pass

        threading.Thread(target=pump, args=(upstream, tls), daemon=True).start()
        pump(tls, upstream)

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.listener.close()
