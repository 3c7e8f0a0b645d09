"""A real HTTP server on 127.0.0.1 for the download tests: serves bytes, and misbehaves on request.

`serve(files)` starts it in a thread; `server.files`, `.etag`, `.ranges`, `.content_length` and
`.faults[path]` (one of "404", "403", "500", "cut", "short", "slow",
"long" (Content-Length half the body), "html" (an HTML page with 200), "trickle" (a byte per trickle_seconds)) change its behaviour between
requests; `server.gets[path]` counts the requests for each path, `server.ranges_asked` the Range headers.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        server = self.server
        path = self.path.split("?")[0]
        with server.lock:
            server.gets[path] += 1
            if self.headers.get("Range"):
                server.ranges_asked.append(self.headers["Range"])
        fault = server.faults.get(path)
        if fault in ("404", "403", "500"):
            return self._status(int(fault))
        if path not in server.files:
            return self._status(404)
        data = server.files[path]
        if fault == "slow":
            time.sleep(server.slow_seconds)
        start, status = self._range(data)
        body = data[start:]
        if fault == "cut":
            body = body[: len(body) // 2]
        elif fault == "short":
            body = body[: len(body) - 7]
        elif fault == "html":
            data = body = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>"
        self.send_response(status)
        if server.etag:
            self.send_header("ETag", '"' + hashlib.md5(data).hexdigest() + '"')
        if server.ranges:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        if fault == "long":  # a Content-Length of half the body: the client stops there
            self.send_header("Content-Length", str((len(data) - start) // 2))
        elif server.content_length:
            self.send_header("Content-Length", str(len(data) - start))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self._send(body, fault)

    def _range(self, data: bytes) -> tuple[int, int]:
        asked = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if not (self.server.ranges and asked):
            return 0, 200
        if_range = self.headers.get("If-Range")
        if if_range and self.server.etag and if_range != '"' + hashlib.md5(data).hexdigest() + '"':
            return 0, 200
        return int(asked.group(1)), 206

    def _send(self, body: bytes, fault: str | None) -> None:
        with contextlib.suppress(OSError):
            if fault == "trickle":  # one byte at a time: never silent for long, never done
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(self.server.trickle_seconds)
            for i in range(0, len(body), 4096):
                self.wfile.write(body[i:i + 4096])
                if self.server.per_chunk_delay:
                    time.sleep(self.server.per_chunk_delay)
            self.wfile.flush()
        if fault in ("cut", "short"):
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)

    def _status(self, code: int) -> None:
        body = f"error {code}".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class TestServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.files = dict(files)
        self.etag = self.ranges = self.content_length = True
        self.faults: dict[str, str] = {}
        self.gets: Counter = Counter()
        self.ranges_asked: list[str] = []
        self.slow_seconds = 3.0
        self.trickle_seconds = 0.2
        self.per_chunk_delay = 0.0
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


@contextlib.contextmanager
def serve(files: dict[str, bytes]):
    server = TestServer(files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
