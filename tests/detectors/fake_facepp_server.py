"""A scripted stand-in for the Face++ Detect endpoint, served on 127.0.0.1 for tests.

Each POST pops the next scripted reply (status, body, headers, delay); when the script runs
out, the ``default`` reply is used. Requests are recorded (form fields parsed) so tests can check
what the client sent. Nothing here ever talks to the internet.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | dict[str, Any] = field(default_factory=lambda: {"faces": []})
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (to provoke client timeouts)

    def encoded(self) -> bytes:
        if isinstance(self.body, dict):
            return json.dumps(self.body).encode()
        return self.body.encode() if isinstance(self.body, str) else self.body


def face(left: int, top: int, width: int, height: int, gender: str | None = "Male") -> dict[str, Any]:
    """One face entry shaped like the real API's (gender None = no attributes returned)."""
    item: dict[str, Any] = {
        "face_token": f"tok-{left}-{top}",
        "face_rectangle": {"left": left, "top": top, "width": width, "height": height},
    }
    if gender is not None:
        item["attributes"] = {"gender": {"value": gender}}
    return item


def detect_body(*faces: dict[str, Any]) -> dict[str, Any]:
    return {
        "request_id": "1,fake",
        "time_used": 3,
        "image_id": "fake==",
        "face_num": len(faces),
        "faces": list(faces),
    }


def error_body(message: str) -> dict[str, Any]:
    return {"request_id": "1,fake", "time_used": 1, "error_message": message}


class FakeFacePlusPlus:
    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.default = Reply()
        self.requests: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/facepp/v3/detect"

    def then(self, *replies: Reply) -> FakeFacePlusPlus:
        with self._lock:
            self.script.extend(replies)
        return self

    def _next(self, form: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(form)
            return self.script.popleft() if self.script else self.default

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length).decode("ascii", "replace")
                form = {k: v[0] for k, v in urllib.parse.parse_qs(raw).items()}
                reply = fake._next(form)
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.encoded()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextmanager
def running() -> Iterator[FakeFacePlusPlus]:
    fake = FakeFacePlusPlus()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
