"""A scripted stand-in for the Face++ Detect endpoint, served on 127.0.0.1 for tests.

Each POST pops the next scripted reply (status, body, headers, delay); when the script runs
out, the ``default`` reply is used. Requests are recorded (form fields parsed) so tests can check
what the client sent. Nothing here ever talks to the internet.
"""

from __future__ import annotations

import time
import urllib.parse
from contextlib import AbstractContextManager
from typing import Any

from tests.detectors.fake_http import QuietHandler, Reply, ScriptedServer, serving


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


class FakeFacePlusPlus(ScriptedServer):
    class Handler(QuietHandler):
        fake: FakeFacePlusPlus

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length).decode("ascii", "replace")
            form = {k: v[0] for k, v in urllib.parse.parse_qs(raw).items()}
            reply = self.fake._next(form)
            if reply.delay:
                time.sleep(reply.delay)
            self.send_reply(reply)

    def __init__(self) -> None:
        super().__init__()
        self.default = Reply(body={"faces": []})
        self.requests: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"{self.address}/facepp/v3/detect"

    def _next(self, form: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(form)
            return self.script.popleft() if self.script else self.default


def running() -> AbstractContextManager[FakeFacePlusPlus]:
    return serving(FakeFacePlusPlus())
