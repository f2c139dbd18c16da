"""Judges against people, shared by the reports of every protocol a judge answers.

A judge is a detector run, ``<detector>@<version>`` (each version apart: two prompts or two
models side by side), whose outputs say an answer per question and, where it gives them,
probabilities per answer. ``judge_runs`` reads every run in scope through a protocol's
``read`` (output -> (answers, probabilities)); ``judge_figures`` measures one run against the
final answers of one question (n, accuracy, Cohen's κ, confusion, Brier, ECE and reliability
bins: ``metrics.questions``, ``metrics.agreement``, ``metrics.calibration``);
``version_pairs`` compares the versions of one detector with each other.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F

from detectors.models import PredictionStatus
from metrics import agreement, calibration
from metrics import questions as qm
from reports.selectors import PREDICTION_TO_ITEM, Scope, detector_runs_in_scope, predictions_in_scope

Answers = dict[str, str]
Probabilities = dict[str, dict[str, float]]
Reader = Callable[[Any], tuple[Answers, Probabilities]]


def output_answers(output: Any) -> Answers:
    """The answers of an ``answers`` output, plain (``{q: value}``) or extended
    (``{"answers": {q: value}, "probabilities": {q: {value: p}}}``)."""
    if not isinstance(output, dict):
        return {}
    answers = output.get("answers") if isinstance(output.get("answers"), dict) else output
    return {str(k): str(v) for k, v in answers.items() if isinstance(v, str)}


def output_probabilities(output: Any) -> Probabilities:
    """The per-question answer probabilities of an extended ``answers`` output ({} when none)."""
    if not isinstance(output, dict) or not isinstance(output.get("probabilities"), dict):
        return {}
    return {
        str(q): {str(v): float(p) for v, p in by_value.items() if isinstance(p, int | float)}
        for q, by_value in output["probabilities"].items()
        if isinstance(by_value, dict)
    }


def read_answers(output: Any) -> tuple[Answers, Probabilities]:
    """The ``answers`` kind's reader."""
    return output_answers(output), output_probabilities(output)


@dataclass(frozen=True)
class JudgeRun:
    """What one judge run said in scope: per item its answers and, where given, its
    probabilities; and the items whose prediction failed."""

    answers: dict[int, Answers] = field(default_factory=dict)
    probabilities: dict[int, Probabilities] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)


def judge_runs(
    scope: Scope, *, kinds: Sequence[str], read: Reader = read_answers, detector: str | None = None
) -> dict[str, JudgeRun]:
    """``detector@version`` -> its ``JudgeRun``, for every run with predictions of ``kinds``
    in scope (every version, not only the latest)."""
    runs = {
        f"{d}@{v}": JudgeRun() for d, v, _ in detector_runs_in_scope(scope, kinds=kinds, detector=detector)
    }
    for name, version, item_id, status, output in (
        predictions_in_scope(scope, kinds=kinds, detector=detector)
        .values_list("detector", "version", F(f"{PREDICTION_TO_ITEM}id"), "status", "output")
        .order_by()
    ):
        run = runs.setdefault(f"{name}@{version}", JudgeRun())
        if status != PredictionStatus.OK:
            run.failed.add(item_id)
            continue
        answers, probabilities = read(output)
        run.answers[item_id] = answers
        if probabilities:
            run.probabilities[item_id] = probabilities
    return dict(sorted(runs.items()))


def judge_figures(
    key: str, values: Sequence[str], run: JudgeRun, finals: Mapping[int, Mapping[str, str]]
) -> dict[str, Any] | None:
    """One judge against the final answers to question ``key`` (answers ``values``), over the
    items with both a final answer among ``values`` and the judge's answer among them: ``n``,
    ``accuracy``, ``cohen_kappa``, ``confusion`` ({people's answer: {judge's answer: items}});
    ``brier``, ``ece``, ``reliability`` over the ``n_probabilities`` of them whose output has
    probabilities (null / empty when none has); ``excluded``: among the items with a final
    answer, the judge's failed predictions and its outputs without a valid answer (filtered,
    unparseable, not asked). None when no item has both."""
    truth: list[str] = []
    said: list[str] = []
    probabilities: list[dict[str, float]] = []
    probability_truth: list[str] = []
    failed = unanswered = 0
    for item_id, answers in sorted(finals.items()):
        final = answers.get(key)
        if final not in values:
            continue
        if item_id in run.failed and item_id not in run.answers:
            failed += 1
            continue
        answer = run.answers.get(item_id, {}).get(key)
        if answer not in values:
            unanswered += item_id in run.answers
            continue
        truth.append(final)
        said.append(answer)
        p = run.probabilities.get(item_id, {}).get(key)
        if p and sum(max(0.0, p.get(v, 0.0)) for v in values) > 0:
            probabilities.append(p)
            probability_truth.append(final)
    if not truth:
        return None
    labels, matrix = agreement.confusion_matrix(truth, said, values)
    calibrated = calibration.calibration(probabilities, probability_truth, values)
    return {
        "n": len(truth),
        "accuracy": qm.accuracy(truth, said),
        "cohen_kappa": qm.cohen_kappa(truth, said),
        "confusion": {a: dict(zip(labels, row, strict=True)) for a, row in zip(labels, matrix, strict=True)},
        "brier": calibrated.brier,
        "ece": calibrated.ece,
        "n_probabilities": calibrated.n,
        "reliability": [
            {"lo": b.lo, "hi": b.hi, "n": b.n, "confidence": b.confidence, "accuracy": b.accuracy}
            for b in calibrated.bins
        ]
        if calibrated.n
        else [],
        "excluded": {"failed": failed, "unanswered": unanswered},
    }


def version_pairs(
    questions: Sequence[tuple[str, Sequence[str]]], runs: Mapping[str, JudgeRun]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every two versions of one detector (``"<d>@<v1> vs <d>@<v2>"``): per question (key,
    values), n items both answered, their share of equal answers and Cohen's κ between them."""
    by_detector: dict[str, list[str]] = defaultdict(list)
    for name in runs:
        by_detector[name.rpartition("@")[0]].append(name)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for names in by_detector.values():
        for i, first in enumerate(names):
            for second in names[i + 1 :]:
                a, b = runs[first].answers, runs[second].answers
                per_question = {}
                for key, values in questions:
                    pairs = [
                        (a[item][key], b[item][key])
                        for item in sorted(set(a) & set(b))
                        if a[item].get(key) in values and b[item].get(key) in values
                    ]
                    if pairs:
                        x, y = [p[0] for p in pairs], [p[1] for p in pairs]
                        per_question[key] = {
                            "n": len(pairs),
                            "agreement": qm.accuracy(x, y),
                            "cohen_kappa": qm.cohen_kappa(x, y),
                        }
                out[f"{first} vs {second}"] = per_question
    return out
