"""A vision-language judge behind any OpenAI-compatible chat-completions server."""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import logging
import math
import os
import random
import re
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from detectors.base import DetectorError, DetectorOptionError, DetectorOutput, DetectorUnavailable
from detectors.judges import JudgeDetector, JudgeQuestion, JudgeResponseData, judge_output
from detectors.retry import RetriesExhausted, Retryable, retry_after_seconds, with_retries

if TYPE_CHECKING:
    import httpx
    from PIL.Image import Image as PILImage

logger = logging.getLogger(__name__)

BASE_URL_ENV = "BIASLAB_JUDGE_BASE_URL"
API_KEY_ENV = "BIASLAB_JUDGE_API_KEY"

#: The prompt sent with each image unless ``prompt_template`` names a file: ``{question}`` is the
#: question's text, ``{choices}`` its choices' names, one per line after "- ".
DEFAULT_TEMPLATE = "{question}\nAnswer with exactly one of these choices, and nothing else:\n{choices}"
CONSTRAIN_MODES = ("auto", "choice", "json_schema", "none")
#: ``auto`` tries these in turn while the server refuses them (HTTP 400/422).
AUTO_STEPS = ("choice", "json_schema", "none")
TOP_LOGPROBS = 20  # OpenAI's maximum and vLLM's default --max-logprobs
MAX_TOKENS = 64
RAW_MAX = 2000  # characters of a raw answer kept
MEMORY = 4096  # outcomes kept in this process for a batch retried image by image


class JudgeRequestFailed(DetectorError):
    """The server gave no usable answer after every attempt (or refused the request)."""


def choice_texts(question: JudgeQuestion) -> list[str]:
    """What the model reads and may answer: each choice's text (its value when it has none)."""
    return [text or value for value, text in question.choices]


@dataclass(frozen=True)
class JudgeAnswer:
    """One question's answer: ``value`` is the choice's value, or None when the raw text is not
    a choice (unparseable); ``probabilities`` by choice value when the server gave logprobs."""

    value: str | None
    raw: str
    probabilities: dict[str, float] | None = None


@dataclass
class Usage:
    """What a run spent: HTTP requests sent (retries included), cache hits, tokens, cost."""

    requests: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


class _Refused(Exception):
    """HTTP 400/422: the server refuses this request as made (a parameter it does not take)."""


# --- pure parts: prompt, parsing, probabilities ---------------------------------------------------
def prompt_text(template: str, question: JudgeQuestion) -> str:
    choices = "\n".join(f"- {name}" for name in choice_texts(question))
    return template.replace("{question}", question.text).replace("{choices}", choices)


def answer_value(text: str, question: JudgeQuestion) -> str | None:
    """The value of the one choice whose value or name equals ``text`` trimmed and case-folded;
    None when none does, or more than one."""
    wanted = text.strip().casefold()
    found = {
        value for value, name in question.choices if wanted in (value.casefold(), (name or value).casefold())
    }
    return found.pop() if len(found) == 1 else None


_JSON_ANSWER = re.compile(r'"answer"\s*:\s*"')


def answer_text(content: str, mode: str) -> tuple[str, int] | None:
    """The answer's text in a response and where it starts in ``content``; None when a
    ``json_schema`` response is not an object with a string ``answer``."""
    if mode != "json_schema":
        return content, len(content) - len(content.lstrip())
    try:
        parsed = json.loads(content)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("answer"), str):
        return None
    match = _JSON_ANSWER.search(content)
    return parsed["answer"], (match.end() if match else -1)


def choice_probabilities(
    content: str, start: int, tokens: Sequence[Mapping[str, Any]], question: JudgeQuestion
) -> dict[str, float] | None:
    """Each choice's probability from the ``logprobs.content`` of a response, or None when the tokens do not
    say (the rule: docs/reference/detector-rules.md)."""
    texts = [str(token.get("token", "")) for token in tokens]
    if not 0 <= start < len(content) or "".join(texts)[: start + 1] != content[: start + 1]:
        return None
    offset = index = 0
    for index, text in enumerate(texts):  # noqa: B007 (index is read after the loop)
        if offset + len(text) > start:
            break
        offset += len(text)
    prefix = content[offset:start]  # what the token holds before the answer: a quote, a space
    names = [(value, (name or value).casefold()) for value, name in question.choices]

    def owner(alternative: str) -> str | bool | None:
        """The value of the choice ``alternative`` begins; None for none; False for several."""
        if not alternative.startswith(prefix):
            return None
        rest = alternative[len(prefix) :]
        rest = (rest if prefix.strip() else rest.lstrip()).casefold()
        hits = {value for value, name in names if rest and name.startswith(rest)}
        return False if len(hits) > 1 else (hits.pop() if hits else None)

    chosen = tokens[index]
    if owner(texts[index]) is False:
        return None
    mass = dict.fromkeys((value for value, _ in question.choices), 0.0)
    for alternative in chosen.get("top_logprobs") or []:
        value = owner(str(alternative.get("token", "")))
        logprob = alternative.get("logprob")
        if isinstance(value, str) and isinstance(logprob, int | float) and math.isfinite(logprob):
            mass[value] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    return {value: p / total for value, p in mass.items()}


def judge_answer(response: JudgeResponseData, question: JudgeQuestion) -> JudgeAnswer:
    """The answer a cached or fresh response gives to ``question`` (strict; docs/reference/detector-rules.md)."""
    raw = response.content[:RAW_MAX]
    found = answer_text(response.content, response.mode)
    value = answer_value(found[0], question) if found else None
    return JudgeAnswer(value=value, raw=raw, probabilities=response.probabilities if value else None)


def cache_key(*, image_sha256: str, question: JudgeQuestion, template: str, model: str) -> str:
    """The response cache's key: sha256 over (image, question, choices, template, model)."""
    parts = [image_sha256, question.text, [list(c) for c in question.choices], template, model]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


def encode_image(image: PILImage, max_side: int = 0) -> bytes:
    """JPEG (quality 95) bytes of the image as sent, shrunk to ``max_side`` when it is set."""
    img = image.convert("RGB")
    if max_side and max(img.size) > max_side:
        img = img.copy()
        img.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    img.save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every client of the process (building one costs ~0.1 s)."""
    return ssl.create_default_context()


def _clean(text: str) -> str:
    """Text a database column and a JSON output take (PostgreSQL stores no NUL)."""
    return text.replace("\x00", "\ufffd")


# --- the detector ------------------------------------------------------------------------------
class ApiJudgeDetector(JudgeDetector):
    key: ClassVar[str] = "api_judge"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = (
        "A vision-language judge behind an OpenAI-compatible chat-completions server "
        "(vllm serve, SGLang, Ollama, LM Studio, a hosted API), asked the study's own questions: "
        "gender verdicts in a gender study, answers in a questions or attributes study."
    )
    #: Sends HTTP requests from the process that stores the predictions (cache and counters live
    #: in its database): ``--executor ray`` is refused; ``concurrency`` sets the requests in flight.
    in_process_only: ClassVar[bool] = True
    option_help: ClassVar[dict[str, str]] = {
        "model": "the model the server serves, as its /models lists it (required)",
        "prompt_template": "a text file with {question} and {choices}; default: the documented template",
        "constrain": "auto (default), choice (vLLM guided choice), json_schema (response_format), "
        "none: how the answer is held to the choices",
        "concurrency": "requests in flight at once (default 8); use --batch-size at least as large",
        "timeout": "seconds per request (default 60)",
        "max_attempts": "tries per request on 429, 5xx, timeouts and garbage, with backoff (default 5)",
        "backoff_base": "first retry delay in seconds, doubled per retry (default 1)",
        "backoff_cap": "longest backoff in seconds (default 30; a longer Retry-After is honoured)",
        "usd_per_1k_tokens": "price per 1000 tokens (prompt + completion): the run records its cost",
        "max_image_side": "shrink images to this many pixels a side before sending (default: as stored)",
    }

    def __init__(
        self,
        *,
        device: str = "cpu",
        model: str = "",
        prompt_template: str = "",
        constrain: str = "auto",
        concurrency: int = 8,
        timeout: float = 60.0,
        max_attempts: int = 5,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        usd_per_1k_tokens: float | None = None,
        max_image_side: int = 0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        **options: Any,
    ) -> None:
        super().__init__(device=device, **options)
        self.model = str(model).strip()
        if not self.model:
            raise DetectorOptionError(
                "api_judge needs the served model: --option model=NAME (as GET /models lists it)."
            )
        if constrain not in CONSTRAIN_MODES:
            raise DetectorOptionError(
                f"api_judge's option constrain must be one of {', '.join(CONSTRAIN_MODES)}, got {constrain!r}."
            )
        self.constrain = constrain
        self.template = self._template(str(prompt_template))
        self.concurrency = self.number_option("concurrency", concurrency, int, minimum=1)
        self.timeout = self.number_option("timeout", timeout)
        self.max_attempts = self.number_option("max_attempts", max_attempts, int, minimum=1)
        self.backoff_base = self.number_option("backoff_base", backoff_base)
        self.backoff_cap = self.number_option("backoff_cap", backoff_cap)
        self.usd_per_1k_tokens = (
            None if usd_per_1k_tokens is None else self.number_option("usd_per_1k_tokens", usd_per_1k_tokens)
        )
        self.max_image_side = self.number_option("max_image_side", max_image_side, int)
        self.sleep = sleep  # injectable: tests record the waits instead of waiting
        self.rng = rng or random.Random()
        self.usage = Usage()
        self._taken = Usage()
        #: (constraint, logprobs) from the most to the least the server is asked to do; ``_rung``
        #: is where requests start: the furthest step a request has succeeded on after refusals.
        self._ladder = [
            (mode, logprobs)
            for mode in (AUTO_STEPS if constrain == "auto" else (constrain,))
            for logprobs in (True, False)
        ]
        self._rung = 0
        self._rung_lock = threading.Lock()
        self._base_url = ""
        self._key = ""
        self._client: httpx.Client | None = None
        # Outcomes of this process's requests by cache key: a batch retried image by image
        # (detectors.executors.workers.outputs_predict) must not send its requests again.
        self._memory: OrderedDict[str, JudgeResponseData | JudgeRequestFailed] = OrderedDict()

    @staticmethod
    def _template(path: str) -> str:
        if not path:
            return DEFAULT_TEMPLATE
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DetectorOptionError(f"api_judge cannot read prompt_template {path!r}: {exc}") from None
        if "{question}" not in text:
            raise DetectorOptionError(
                f"api_judge's prompt_template {path!r} has no {{question}} placeholder."
            )
        return text

    @property
    def template_hash(self) -> str:
        return hashlib.sha256(self.template.encode()).hexdigest()[:8]

    @property
    def judge_version(self) -> str:
        # The model and the prompt decide the answers: either changed is a new version (the run
        # adds the study's questions, ``JudgeDetector.version_id``). What the server runs behind
        # a model name is its business; the name is all the client knows.
        side = f"+side{self.max_image_side}" if self.max_image_side else ""
        return f"{self.version}+{self.model}+t{self.template_hash}{side}"[:190]  # room for +q…

    # --- connection ---------------------------------------------------------------------------
    def load(self) -> None:
        """Read the settings and check the server answers and serves ``model`` (GET /models)."""
        import httpx

        base = os.environ.get(BASE_URL_ENV, "").strip().rstrip("/")
        if not base:
            raise DetectorUnavailable(
                f"api_judge is not configured: set {BASE_URL_ENV} to the server's OpenAI-compatible base "
                f"URL (e.g. http://127.0.0.1:8000/v1), and {API_KEY_ENV} if it wants a key."
            )
        if not base.startswith(("http://", "https://")):
            raise DetectorUnavailable(f"{BASE_URL_ENV} must be an http(s) URL, got {base!r}.")
        self._base_url = base
        self._key = os.environ.get(API_KEY_ENV, "").strip()
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self._client = httpx.Client(
            base_url=base + "/",
            verify=_tls_context(),
            headers=headers,
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
        )
        try:
            response = self._client.get("models")
        except httpx.HTTPError as exc:
            raise DetectorUnavailable(
                self._redact(
                    f"cannot reach the judge server at {BASE_URL_ENV}={base}: {type(exc).__name__}: {exc}"
                )
            ) from None
        if response.status_code in (401, 403):
            raise DetectorUnavailable(
                f"the judge server at {base} refused the request (HTTP {response.status_code}): "
                f"check {API_KEY_ENV}."
            )
        try:
            served = [str(m["id"]) for m in response.json()["data"]] if response.status_code == 200 else []
        except (ValueError, KeyError, TypeError):
            served = []  # a server without a readable /models: the first request will tell
        if served and self.model not in served:
            raise DetectorUnavailable(
                f"the judge server at {base} does not serve model {self.model!r}; it serves: {', '.join(served)}."
            )

    def _redact(self, text: str) -> str:
        """``text`` with the API key blanked out (an error body or exception may echo it)."""
        return text.replace(self._key, "[BIASLAB_JUDGE_API_KEY]") if self._key else text

    # --- usage --------------------------------------------------------------------------------
    def usage_take(self) -> dict[str, float]:
        """What was spent since the last call, for the run's counters (``Detector.usage_take``)."""
        with self.usage.lock:
            now = {
                name: getattr(self.usage, name)
                for name in ("requests", "cache_hits", "prompt_tokens", "completion_tokens")
            }
        delta: dict[str, float] = {name: now[name] - getattr(self._taken, name) for name in now}
        for name, value in now.items():
            setattr(self._taken, name, value)
        if self.usd_per_1k_tokens is not None:
            delta["cost_usd"] = (
                (delta["prompt_tokens"] + delta["completion_tokens"]) / 1000 * self.usd_per_1k_tokens
            )
        return delta

    # --- asking -------------------------------------------------------------------------------
    def answers_for(
        self, images: Sequence[PILImage], questions: Sequence[Sequence[JudgeQuestion]]
    ) -> list[dict[str, JudgeAnswer] | JudgeRequestFailed]:
        """Every question of ``questions[i]`` about ``images[i]``: per image, its answers by
        question key, or the failure that stopped one of them. Cached answers send nothing;
        the rest go out ``concurrency`` at a time; new answers are cached before returning."""
        from detectors.selectors import judge_responses_cached
        from detectors.services import judge_responses_store

        self.ensure_loaded()
        jobs: list[list[tuple[JudgeQuestion, str]]] = []
        known: dict[str, JudgeResponseData | JudgeRequestFailed] = {}  # this call's outcomes by key
        sent: dict[str, tuple[str, str, JudgeQuestion]] = {}  # key → (image sha256, data URL, question)
        for image, asked in zip(images, questions, strict=True):
            jpeg = encode_image(image, self.max_image_side)
            digest = hashlib.sha256(jpeg).hexdigest()
            keys = []
            for question in asked:
                key = cache_key(
                    image_sha256=digest, question=question, template=self.template, model=self.model
                )
                keys.append((question, key))
                if key in self._memory:
                    known[key] = self._memory[key]
                elif key not in sent:
                    data_url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
                    sent[key] = (digest, data_url, question)
            jobs.append(keys)
        cached = judge_responses_cached(list(sent))
        self.usage.add(cache_hits=len(cached))
        for key, data in cached.items():
            self._remember(key, data)
            known[key] = data
            sent.pop(key)
        fresh: dict[str, JudgeResponseData] = {}
        if sent:
            with ThreadPoolExecutor(
                max_workers=min(self.concurrency, len(sent)), thread_name_prefix="judge"
            ) as pool:
                outcomes = dict(
                    zip(sent, pool.map(lambda job: self._request(job[1], job[2]), sent.values()), strict=True)
                )
            for key, outcome in outcomes.items():
                self._remember(key, outcome)
                known[key] = outcome
                if isinstance(outcome, JudgeResponseData):
                    fresh[key] = outcome
            judge_responses_store(
                responses={key: (sent[key][0], sent[key][2].text, data) for key, data in fresh.items()},
                model=self.model,
            )
        results: list[dict[str, JudgeAnswer] | JudgeRequestFailed] = []
        for keys in jobs:
            answers: dict[str, JudgeAnswer] = {}
            failure: JudgeRequestFailed | None = None
            for question, key in keys:
                outcome = known[key]
                if isinstance(outcome, JudgeRequestFailed):
                    failure = failure or outcome
                else:
                    answers[question.key] = judge_answer(outcome, question)
            results.append(failure or answers)
        return results

    def predict(
        self, batch: Sequence[PILImage], questions: Sequence[Sequence[JudgeQuestion]] | None = None
    ) -> list[DetectorOutput]:
        """One output per image of the kind the study reads (``JudgeDetector``): its answers, their
        probabilities when the server gave logprobs, an unparseable answer filtered as ``unparseable`` with
        its raw text in ``detail.raw``."""
        kind = self.declared_kind
        results = self.answers_for(batch, self.questions_of_batch(len(batch), questions))
        failed = next((r for r in results if isinstance(r, JudgeRequestFailed)), None)
        if failed is not None:
            raise failed
        outputs = []
        for answers in results:
            assert not isinstance(answers, JudgeRequestFailed)
            raw = {key: a.raw for key, a in answers.items() if a.value is None}
            outputs.append(
                judge_output(
                    kind,
                    {key: a.probabilities for key, a in answers.items() if a.probabilities},
                    answers={key: a.value for key, a in answers.items() if a.value is not None},
                    filtered=dict.fromkeys(raw, "unparseable"),
                    detail={"raw": raw} if raw else None,
                )
            )
        return outputs

    def _remember(self, key: str, outcome: JudgeResponseData | JudgeRequestFailed) -> None:
        self._memory[key] = outcome
        self._memory.move_to_end(key)
        while len(self._memory) > MEMORY:
            self._memory.popitem(last=False)

    def _request(self, data_url: str, question: JudgeQuestion) -> JudgeResponseData | JudgeRequestFailed:
        """One question about one image, with retries and the ``auto`` steps; never raises."""
        rung = start = self._rung
        refusal = ""
        while True:
            mode, logprobs = self._ladder[rung]
            try:
                response = self._with_retries(self._body(data_url, question, mode, logprobs))
            except _Refused as exc:
                refusal = self._redact(str(exc))
                if rung + 1 == len(self._ladder):
                    return JudgeRequestFailed(f"the judge server refused the request: {refusal}")
                rung += 1
                continue
            except JudgeRequestFailed as exc:
                return exc
            if rung > start:
                self._step_down(rung, refusal)
            return self._response_data(response, mode, question)

    def _step_down(self, rung: int, refusal: str) -> None:
        """Start later requests at ``rung``, which succeeded after the server refused the ones
        above it (another thread may have got there first)."""
        with self._rung_lock:
            if rung <= self._rung:
                return
            self._rung = rung
        mode, logprobs = self._ladder[rung]
        logger.warning(
            "api_judge: the server refused more (%s); asking with constrain=%s%s from now on",
            refusal[:200],
            mode,
            "" if logprobs else " and no logprobs",
        )

    def _body(self, data_url: str, question: JudgeQuestion, mode: str, logprobs: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url}},
                        {"type": "text", "text": prompt_text(self.template, question)},
                    ],
                }
            ],
            "temperature": 0,
            "max_tokens": MAX_TOKENS,
        }
        if logprobs:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        if mode == "choice":
            # Newer vLLM reads structured_outputs, older guided_choice; each ignores the other.
            body.update(
                structured_outputs={"choice": choice_texts(question)}, guided_choice=choice_texts(question)
            )
        elif mode == "json_schema":
            schema = {
                "type": "object",
                "properties": {"answer": {"type": "string", "enum": choice_texts(question)}},
                "required": ["answer"],
                "additionalProperties": False,
            }
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "strict": True, "schema": schema},
            }
        return body

    def _with_retries(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return with_retries(
                lambda: self._attempt(body),
                max_attempts=self.max_attempts,
                base=self.backoff_base,
                cap=self.backoff_cap,
                rng=self.rng,
                sleep=self.sleep,
            )
        except RetriesExhausted as exc:
            raise JudgeRequestFailed(
                self._redact(f"the judge server failed {self.max_attempts} attempts: {exc}")
            ) from None

    def _attempt(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        assert self._client is not None
        self.usage.add(requests=1)
        try:
            response = self._client.post("chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise Retryable(f"no answer within {self.timeout:g} s ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise Retryable(
                self._redact(f"cannot reach {self._base_url}: {type(exc).__name__}: {exc}")
            ) from None
        status, text = response.status_code, self._redact(response.text[:300])
        if status == 429 or status >= 500:
            raise Retryable(f"HTTP {status} {text!r}", retry_after_seconds(response.headers))
        if status in (400, 422):
            raise _Refused(f"HTTP {status} {text!r}")
        if status != 200:
            raise JudgeRequestFailed(f"the judge server refused the request: HTTP {status} {text!r}")
        try:
            payload = response.json()
            message = payload["choices"][0]["message"]
            content = message.get("content")
            if not isinstance(content, str):
                raise TypeError("message.content is not text")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise Retryable(f"HTTP 200 with a body that is not a chat completion ({exc}): {text!r}") from None
        return payload

    def _response_data(
        self, payload: dict[str, Any], mode: str, question: JudgeQuestion
    ) -> JudgeResponseData:
        choice = payload["choices"][0]
        content = _clean(choice["message"]["content"])
        usage = payload.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        tokens = {
            name: value if isinstance(value := usage.get(name), int) and value >= 0 else 0
            for name in ("prompt_tokens", "completion_tokens")
        }
        self.usage.add(**tokens)
        probabilities = None
        logprobs = (
            (choice.get("logprobs") or {}).get("content")
            if isinstance(choice.get("logprobs"), dict)
            else None
        )
        found = answer_text(content, mode)
        if isinstance(logprobs, list) and found and all(isinstance(t, dict) for t in logprobs):
            probabilities = choice_probabilities(content, found[1], logprobs, question)
        return JudgeResponseData(content=content, mode=mode, probabilities=probabilities, **tokens)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
