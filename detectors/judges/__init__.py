"""Judges: detectors that answer a study's own questions about each image (a VLM on this machine, a model
behind an API), instead of one fixed question."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from detectors.base import FEMALE, MALE, Detector, DetectorError, DetectorOutput
from detectors.kinds import KIND_GENDER

#: The questions protocol's output kind (``protocols.questions.kinds``), named here as text:
#: detectors sit below the protocols and never import them.
KIND_ANSWERS = "answers"
#: What a judge asks in a gender study, whatever the study's own choices for people.
GENDER_KEY = "gender"
CANT_TELL = "cant_tell"
GENDER_CHOICES: tuple[tuple[str, str], ...] = ((MALE, "male"), (FEMALE, "female"), (CANT_TELL, "can't tell"))
#: The filter reason of a "can't tell" (``detectors.kinds.FILTER_REASONS``).
CANT_TELL_REASON = "uncertain"


class JudgeQuestion(NamedTuple):
    """One question a judge asks: ``(key, text, ((choice value, choice text), …))``."""

    key: str
    text: str
    choices: tuple[tuple[str, str], ...]


def question_of(question: Sequence[Any]) -> JudgeQuestion:
    """A ``JudgeQuestion`` from any ``(key, text, [(value, text), …])`` sequence."""
    key, text, choices = question
    return JudgeQuestion(str(key), str(text), tuple((str(v), str(t)) for v, t in choices))


class StudyAskError(DetectorError, ValueError):
    """A judge cannot serve this run: no study given, a study without questions, a protocol a
    judge cannot answer. One line for the user; nothing is written."""


@dataclass(frozen=True)
class StudyAsk:
    """What a judge asks in one study: the output ``kind`` and every question, in order."""

    kind: str
    questions: tuple[JudgeQuestion, ...]

    @property
    def digest(self) -> str:
        """A short hash of the kind and the questions (keys, texts, choices): part of the version."""
        text = json.dumps([self.kind, [list(q) for q in self.questions]], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:7]

    def for_keys(self, keys: Sequence[str]) -> tuple[JudgeQuestion, ...]:
        """The questions an image is asked when its items ask ``keys`` (``[]``: every question),
        in the study's order; keys the study no longer has are ignored (none left: every one)."""
        wanted = set(keys)
        chosen = tuple(q for q in self.questions if q.key in wanted)
        return chosen or self.questions


def _argmax(probabilities: Mapping[str, float]) -> str:
    return max(probabilities, key=lambda value: probabilities[value])


def judge_output(
    kind: str,
    probabilities: Mapping[str, Mapping[str, float]],
    *,
    answers: Mapping[str, str] | None = None,
    filtered: Mapping[str, str] | None = None,
    detail: Mapping[str, Any] | None = None,
) -> DetectorOutput:
    """A judge's output for one image, of ``kind`` (``StudyAsk.kind``)."""
    answers = (
        dict(answers) if answers is not None else {q: _argmax(ps) for q, ps in probabilities.items() if ps}
    )
    filtered = dict(filtered or {})
    if kind == KIND_GENDER:
        scores = {value: float(p) for value, p in probabilities.get(GENDER_KEY, {}).items()}
        text = json.dumps(dict(detail), ensure_ascii=False, sort_keys=True) if detail else ""
        answer = answers.get(GENDER_KEY)
        if answer in (MALE, FEMALE):
            return DetectorOutput(verdict=answer, scores=scores, detail=text)
        reason = CANT_TELL_REASON if answer == CANT_TELL else filtered.get(GENDER_KEY, "unparseable")
        return DetectorOutput.filtered(reason, scores=scores, detail=text)
    data: dict[str, Any] = {
        "answers": answers,
        "probabilities": {
            q: {v: float(p) for v, p in ps.items()} for q, ps in probabilities.items() if q in answers
        },
    }
    if filtered:
        data["filtered"] = filtered
    if detail:
        data["detail"] = dict(detail)
    return DetectorOutput.of(kind, data)


class JudgeDetector(Detector):
    """Base of the judges: asks each image its questions, answers with their probabilities. Subclasses give
    ``judge_version`` (their own: model, prompt template …) and ``predict(batch, questions=…)``.
    ``version_id`` adds the bound study's question digest (``+q…``)."""

    needs_questions: ClassVar[bool] = True
    output_kind: ClassVar[str] = KIND_ANSWERS

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.ask: StudyAsk | None = None

    def questions_bind(self, ask: StudyAsk) -> None:
        """Bind to a study's questions (before ``version_id`` is read and before ``predict``)."""
        self.ask = ask

    @property
    def declared_kind(self) -> str:
        return self.ask.kind if self.ask is not None else self.output_kind

    @property
    def judge_version(self) -> str:
        """The judge's own version (code, model, prompt), without the questions' digest."""
        return self.version

    @property
    def version_id(self) -> str:
        base = self.judge_version
        return f"{base}+q{self.ask.digest}" if self.ask is not None else base

    def questions_of_batch(
        self, size: int, questions: Sequence[Sequence[JudgeQuestion]] | None
    ) -> list[tuple[JudgeQuestion, ...]]:
        """One tuple of questions per image: ``questions`` as given, else the bound study's all."""
        if questions is not None:
            if len(questions) != size:
                raise ValueError(f"{len(questions)} question lists for {size} images")
            return [tuple(question_of(q) for q in asked) for asked in questions]
        if self.ask is None:
            raise StudyAskError(f"{self.key} was given no questions and is bound to no study")
        return [self.ask.questions] * size


@dataclass(frozen=True)
class JudgeResponseData:
    """A server's answer as the cache keeps it: raw text, how it was constrained, the choice
    probabilities read from its logprobs (None without them) and the tokens it cost."""

    content: str
    mode: str
    probabilities: dict[str, float] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
