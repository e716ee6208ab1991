"""A loopback HTTP server for the download tests: 127.0.0.1 only, Range requests, and faults on demand.

Written for the tests with Python's http.server: it serves ``files`` (path -> bytes), answers a
``Range: bytes=N-`` with 206 and Content-Range, records every request (path, Range header,
whether it came as a proxy request), and can cut a response short (``cut_after``: close the
connection after N bytes, once) or hold it (``hold_after``: stop after N bytes until ``release``
is set). It also answers as a forward proxy (absolute-URI request lines), so a test can check
that downloads use the proxy the environment names. A POST to a path in ``post_answers`` is answered
by that function, shown the request's JSON body: it returns (status, body bytes, content type), as
TotalSegmentator's licence server answers ``/download_weights``.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

HOLD_LIMIT_S = 60.0  # a held response gives up by itself: the server never outlives its test


class LoopbackServer:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.status: dict[str, int] = {}  # path -> an error status to answer with
        self.cut_after: dict[str, int] = {}
        self.hold_after: dict[str, int] = {}
        self.ranges_supported = True  # False: answer every request whole (200), as some servers do
        self.post_answers: dict = {}  # path -> function(json body) -> (status, bytes, content type)
        self.release = threading.Event()
        self.requests: list[dict] = []
        self.bytes_sent = threading.Event()  # set once a held response has sent its bytes
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                path = urlparse(self.path).path
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                server.requests.append({"path": path, "range": self.headers.get("Range"), "method": "POST",
                                        "json": body, "content_type": self.headers.get("Content-Type"),
                                        "proxied": self.path.startswith("http://")})
                answer = server.post_answers.get(path)
                if answer is None:
                    self.send_error(404)
                    return
                status, payload, content_type = answer(body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                cut = server.cut_after.pop(path, None)
                self.wfile.write(payload if cut is None else payload[:cut])
                self.wfile.flush()
                if cut is not None:
                    self.close_connection = True

            def do_GET(self) -> None:
                path = urlparse(self.path).path
                server.requests.append({"path": path, "range": self.headers.get("Range"),
                                        "proxied": self.path.startswith("http://")})
                if path in server.status:
                    self.send_error(server.status[path])
                    return
                body = server.files.get(path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                match = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "")
                if match and server.ranges_supported:
                    start = int(match[1])
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                payload = body[start:]
                cut = server.cut_after.pop(path, None)
                hold = server.hold_after.pop(path, None)
                if cut is not None:
                    self.wfile.write(payload[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if hold is not None:
                    self.wfile.write(payload[:hold])
                    self.wfile.flush()
                    server.bytes_sent.set()
                    if not server.release.wait(HOLD_LIMIT_S):
                        self.close_connection = True
                        return
                    payload = payload[hold:]
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def ranges(self, path: str) -> list[str | None]:
        return [r["range"] for r in self.requests if r["path"] == path]

    def __enter__(self) -> "LoopbackServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
