"""Judges against people, shared by every protocol a judge answers: each run against the final
answers, and versions compared."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F

from detectors.kinds import answers_of, filtered_of, probabilities_of
from detectors.models import PredictionStatus
from metrics import agreement, calibration
from metrics import questions as qm
from reports.selectors import PREDICTION_TO_ITEM, Scope, detector_runs_in_scope, predictions_in_scope
from reports.tables import Table, int_field, num_field, text_field

Answers = dict[str, str]
Probabilities = dict[str, dict[str, float]]
Filtered = dict[str, str]
Reader = Callable[[Any], tuple[Answers, Probabilities, Filtered]]


def read_answers(output: Any) -> tuple[Answers, Probabilities, Filtered]:
    """The ``answers`` kind's reader: answers, probabilities and the questions it set aside."""
    return answers_of(output), probabilities_of(output), filtered_of(output)


def gender_reader(clear: Sequence[str], key: str = "gender") -> Reader:
    """The ``gender`` kind's reader: a clear verdict is the answer, a filtered one set aside."""

    def read(output: Any) -> tuple[Answers, Probabilities, Filtered]:
        if not isinstance(output, Mapping):
            return {}, {}, {}
        label = str(output.get("label", ""))
        raw = output.get("scores")
        scores: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        probabilities: Probabilities = {}
        if "cant_tell" in scores and all(isinstance(scores.get(v), int | float) for v in clear):
            probabilities = {key: {v: float(scores[v]) for v in clear}}
        if label in clear:
            return {key: label}, probabilities, {}
        return {}, probabilities, {key: str(output.get("reason", "") or "filtered")}

    return read


@dataclass(frozen=True)
class JudgeRun:
    """What one judge run said in scope, and the items whose prediction failed."""

    answers: dict[int, Answers] = field(default_factory=dict)
    probabilities: dict[int, Probabilities] = field(default_factory=dict)
    filtered: dict[int, Filtered] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)


def judge_runs(
    scope: Scope, *, kinds: Sequence[str], read: Reader = read_answers, detector: str | None = None
) -> dict[str, JudgeRun]:
    """``detector@version`` -> its ``JudgeRun`` for every run of ``kinds`` in scope."""
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
        answers, probabilities, filtered = read(output)
        run.answers[item_id] = answers
        if probabilities:
            run.probabilities[item_id] = probabilities
        if filtered:
            run.filtered[item_id] = filtered
    return dict(sorted(runs.items()))


def judge_figures(
    key: str, values: Sequence[str], run: JudgeRun, finals: Mapping[int, Mapping[str, str]]
) -> dict[str, Any] | None:
    """One judge against the final answers to question ``key`` (n, accuracy, κ, confusion, calibration,
    exclusions); None when no item has both answers."""
    truth: list[str] = []
    said: list[str] = []
    probabilities: list[dict[str, float]] = []
    probability_truth: list[str] = []
    failed = filtered = unanswered = 0
    for item_id, answers in sorted(finals.items()):
        final = answers.get(key)
        if final is None or final not in values:
            continue
        if item_id in run.failed and item_id not in run.answers:
            failed += 1
            continue
        answer = run.answers.get(item_id, {}).get(key)
        if answer is None or answer not in values:
            if key in run.filtered.get(item_id, {}):
                filtered += 1
            else:
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
        "excluded": {"failed": failed, "filtered": filtered, "unanswered": unanswered},
    }


def version_pairs(
    questions: Sequence[tuple[str, Sequence[str]]], runs: Mapping[str, JudgeRun]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every two versions of one detector: per question, items both answered, agreement and κ."""
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


def judged(
    questions: Sequence[tuple[str, Sequence[str]]],
    runs: Mapping[str, JudgeRun],
    finals: Mapping[int, Mapping[str, str]],
) -> dict[str, dict[str, Any]]:
    """A report's ``judges`` (each run against the final answers, per (question, values)) and
    ``judge_versions``."""
    return {
        "judges": {
            name: {
                key: figures
                for key, values in questions
                if (figures := judge_figures(key, values, run, finals)) is not None
            }
            for name, run in runs.items()
        },
        "judge_versions": version_pairs(questions, runs),
    }


# --- tables (pure: the report's dicts in, ``reports.tables.Table`` out) --------------------------


def table_builders(question: str = "Question") -> dict[str, Callable[[Any], Table]]:
    """The ``judges`` and ``judge_versions`` tables of a result whose report holds both."""
    return {
        "judges": lambda result: judges_table(result.report["judges"], question=question),
        "judge_versions": lambda result: judge_versions_table(
            result.report["judge_versions"], result.report["judges"], question=question
        ),
    }


def judges_table(
    judges: Mapping[str, Mapping[str, Mapping[str, Any]]], *, question: str = "Question"
) -> Table:
    """``judges``: per judge and question, the item-by-item figures (``judge_figures``)."""
    return Table.of(
        "judges",
        "Judges against people, image by image",
        "Per judge (detector@version) and question, over the images with both its answer and a final "
        "answer: accuracy and Cohen's κ; Brier score and expected calibration error (10 equal-width "
        "bins of the top answer's probability) over those whose output has probabilities. Among images "
        "with a final answer: failed predictions; filtered: the question set aside (can't tell, "
        "unparseable, an API error); not answered: not asked, or an answer outside the choices.",
        (
            text_field("judge", "Judge"),
            text_field("question", question),
            int_field("n", "n"),
            num_field("accuracy", "Accuracy"),
            num_field("cohen_kappa", "Cohen's κ"),
            num_field("brier", "Brier"),
            num_field("ece", "ECE"),
            int_field("n_probabilities", "n with probabilities"),
            int_field("failed", "Failed"),
            int_field("filtered", "Filtered"),
            int_field("unanswered", "Not answered"),
        ),
        (
            {**d, **d["excluded"], "judge": name, "question": key}
            for name, by_question in judges.items()
            for key, d in by_question.items()
        ),
    )


def judge_versions_table(
    pairs: Mapping[str, Mapping[str, Mapping[str, Any]]],
    judges: Mapping[str, Mapping[str, Mapping[str, Any]]],
    *,
    question: str = "Question",
) -> Table:
    """``judge_versions``: two versions of one judge, their agreement and each one's κ against people."""

    def kappa(judge: str, key: str) -> float | None:
        return judges.get(judge, {}).get(key, {}).get("cohen_kappa")

    def record(pair: str, key: str, d: Mapping[str, Any]) -> dict[str, Any]:
        first, _, second = pair.partition(" vs ")
        people = {"kappa_a_people": kappa(first, key), "kappa_b_people": kappa(second, key)}
        return {**d, **people, "judge_a": first, "judge_b": second, "question": key}

    return Table.of(
        "judge_versions",
        "Two versions of one judge",
        "Two versions of one judge (two prompts, two models): over the images both answered, their "
        "agreement and Cohen's κ with each other; beside it each one's κ against people.",
        (
            text_field("judge_a", "Judge A"),
            text_field("judge_b", "Judge B"),
            text_field("question", question),
            int_field("n", "n"),
            num_field("agreement", "Agreement A-B"),
            num_field("cohen_kappa", "κ A-B"),
            num_field("kappa_a_people", "κ A-people"),
            num_field("kappa_b_people", "κ B-people"),
        ),
        (record(pair, key, d) for pair, by_question in pairs.items() for key, d in by_question.items()),
    )
