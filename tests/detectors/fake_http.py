"""A scripted JSON server on 127.0.0.1 for tests: the shared base of the fake remote APIs.

A subclass names its ``Handler``; each request the handler answers pops the next scripted
``Reply`` (``then``), and ``running`` serves one for the length of a ``with`` block.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self, TypeVar


@dataclass
class Reply:
    status: int = 200
    body: bytes | str | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (to provoke client timeouts)

    def encoded(self) -> bytes:
        if isinstance(self.body, dict):
            return json.dumps(self.body).encode()
        return self.body.encode() if isinstance(self.body, str) else self.body


class QuietHandler(BaseHTTPRequestHandler):
    fake: Any  # the ScriptedServer this handler answers for (set by ScriptedServer.start)

    def send_reply(self, reply: Reply) -> None:
        payload = reply.encoded()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


class ScriptedServer:
    Handler: ClassVar[type[QuietHandler]]

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def address(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def then(self, *replies: Reply) -> Self:
        with self._lock:
            self.script.extend(replies)
        return self

    def start(self) -> None:
        handler = type("Handler", (self.Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


S = TypeVar("S", bound="ScriptedServer")


@contextmanager
def serving(fake: S) -> Iterator[S]:
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
