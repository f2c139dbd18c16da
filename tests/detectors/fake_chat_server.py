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
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from tests.detectors.fake_http import QuietHandler, Reply, ScriptedServer, serving


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


class FakeChatServer(ScriptedServer):
    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
        disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms ACK wait
        fake: FakeChatServer

        def do_GET(self) -> None:
            fake = self.fake
            if self.path.rstrip("/").endswith("/models") and fake.models_reply:
                self.send_reply(fake.models_reply)
            elif self.path.rstrip("/").endswith("/models"):
                data = [{"id": name, "object": "model"} for name in fake.models]
                self.send_reply(Reply(body={"object": "list", "data": data}))
            else:
                self.send_reply(Reply(status=404, body={"error": "not found"}))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self.send_reply(Reply(status=404, body={"error": "not found"}))
                return
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"_raw": raw.decode("utf-8", "replace")}
            reply = self.fake._next(body, dict(self.headers.items()))
            if self.fake.latency:
                time.sleep(self.fake.latency)
            if reply.delay:
                time.sleep(reply.delay)
            self.send_reply(reply)

    def __init__(self) -> None:
        super().__init__()
        self.answer: Callable[[dict[str, Any]], Reply] = first_choice
        self.models = ["judge-model"]
        self.latency = 0.0
        self.models_reply: Reply | None = None  # GET /models answers this instead when set
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    @property
    def base_url(self) -> str:
        return f"{self.address}/v1"

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self.script:
                return self.script.popleft()
        return self.answer(body)


def running() -> AbstractContextManager[FakeChatServer]:
    return serving(FakeChatServer())
