"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests and the bench.

``GET /v1/models`` lists ``models``; each ``POST /v1/chat/completions`` is recorded (its JSON
body and headers) and answered with the next scripted ``Reply``, or when the script is empty
by ``answer(body)``: by default the first choice the request constrains to (``guided_choice``,
a JSON schema's enum), with logprobs when asked. ``latency`` delays every answer (the bench's
fixed server-side time). Nothing here talks to the internet.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


def logprobs(tokens: list[str], alternatives: dict[str, float] | None = None, at: int = 0) -> dict[str, Any]:
    """``logprobs`` of a choice spelling ``tokens``; token ``at`` has ``alternatives`` (token →
    probability) as its top_logprobs, the others only themselves."""
    content = []
    for index, token in enumerate(tokens):
        tops = alternatives if index == at and alternatives else {token: 1.0}
        content.append(
            {
                "token": token,
                "logprob": math.log(tops.get(token, 1.0)),
                "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in tops.items()],
            }
        )
    return {"content": content}


def completion(
    content: str | None,
    *,
    logprobs: dict[str, Any] | None = None,
    prompt_tokens: int = 100,
    completion_tokens: int = 2,
    model: str = "judge-model",
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
    }
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def constrained_names(body: dict[str, Any]) -> list[str]:
    """The choice names a request holds the answer to, whichever way it says so."""
    if body.get("guided_choice"):
        return list(body["guided_choice"])
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    return list(((schema.get("properties") or {}).get("answer") or {}).get("enum") or [])


def first_choice(body: dict[str, Any]) -> Reply:
    """The default answer: the first constrained choice (as JSON under a JSON schema), with
    logprobs 0.7 / 0.3 over the first two choices when the request asks for them."""
    names = constrained_names(body) or ["yes"]
    wanted = body.get("logprobs")
    alternatives = {names[0]: 0.7, **({names[1]: 0.3} if len(names) > 1 else {})}
    if "response_format" in body:
        tokens = ['{"answer": "', names[0], '"}']
        return Reply(
            body=completion("".join(tokens), logprobs=logprobs(tokens, alternatives, 1) if wanted else None)
        )
    return Reply(body=completion(names[0], logprobs=logprobs([names[0]], alternatives) if wanted else None))


class FakeChatServer:
    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.answer: Callable[[dict[str, Any]], Reply] = first_choice
        self.models = ["judge-model"]
        self.latency = 0.0
        self.models_reply: Reply | None = None  # GET /models answers this instead when set
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def then(self, *replies: Reply) -> FakeChatServer:
        with self._lock:
            self.script.extend(replies)
        return self

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self.script:
                return self.script.popleft()
        return self.answer(body)

    def start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
            disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms ACK wait

            def _send(self, reply: Reply) -> None:
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

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models") and fake.models_reply:
                    self._send(fake.models_reply)
                elif self.path.rstrip("/").endswith("/models"):
                    data = [{"id": name, "object": "model"} for name in fake.models]
                    self._send(Reply(body={"object": "list", "data": data}))
                else:
                    self._send(Reply(status=404, body={"error": "not found"}))

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(Reply(status=404, body={"error": "not found"}))
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                reply = fake._next(body, dict(self.headers.items()))
                if fake.latency:
                    time.sleep(fake.latency)
                if reply.delay:
                    time.sleep(reply.delay)
                self._send(reply)

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
def running() -> Iterator[FakeChatServer]:
    fake = FakeChatServer()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
