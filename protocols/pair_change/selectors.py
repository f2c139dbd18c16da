"""Reads of the pair-change analysis besides the measured pairs: the draws, the human
answers, and a word's pairs for its drill-down."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from annotate.models import FinalLabel, Label
from metrics import pair_change as pc
from protocols.pair_change.sampling import study_samples
from studies.models import Item, Study
from studies.selectors import study_questions

#: Question values that name a verdict label by another word.
SYNONYMS = {"same": pc.UNCHANGED, "no_change": pc.UNCHANGED, "no_significant_difference": pc.UNCHANGED}


class QuestionMismatch(ValueError):
    """A question of the study cannot be compared with the automatic verdicts."""


def verdict_label(attribute: str, value: str) -> str | None:
    """The ``metrics.pair_change`` label a question value stands for, or None: ``same`` →
    ``unchanged``; gender's ``male_female`` → ``male_to_female``; a label itself stays."""
    label = SYNONYMS.get(value, value)
    if attribute == pc.GENDER and "_to_" not in label and label.count("_") == 1:
        label = label.replace("_", "_to_")
    return label if label in pc.VERDICT_LABELS[attribute] else None


def human_labels(study: Study) -> dict[str, dict[str, str]]:
    """Question key (age, gender, skin) -> its choice values -> verdict label; QuestionMismatch
    when a question is missing or does not map one-to-one."""
    questions = {q.key: q for q in study_questions(study)}
    mapping: dict[str, dict[str, str]] = {}
    for attribute in pc.ATTRIBUTES:
        question = questions.get(attribute)
        if question is None:
            raise QuestionMismatch(
                f"Study '{study.slug}' has no question '{attribute}': the pair-change report compares "
                "the answers to age, gender and skin with the automatic verdicts."
            )
        labels = {value: verdict_label(attribute, value) for value in question.values}
        wanted = set(pc.VERDICT_LABELS[attribute])
        if None in labels.values() or set(labels.values()) != wanted or len(labels) != len(wanted):
            raise QuestionMismatch(
                f"Question '{attribute}' of study '{study.slug}' has the answers "
                f"{', '.join(question.values) or 'none'}; the report needs one answer for each of "
                f"{', '.join(pc.VERDICT_LABELS[attribute])}."
            )
        mapping[attribute] = {value: label for value, label in labels.items() if label is not None}
    return mapping


def drawn_verdicts(study: Study, *, t2i_model: str | None = None) -> dict[str, dict[str, str]]:
    """attribute -> item key -> the automatic verdict its first draw recorded, for the pairs
    still in the study (of ``t2i_model`` when given)."""
    drawn: dict[str, dict[str, str]] = {attribute: {} for attribute in pc.ATTRIBUTES}
    for record in study_samples(study):
        attribute = record.get("attribute")
        if attribute not in drawn:
            continue
        for entry in record.get("items") or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("item"), str):
                drawn[attribute].setdefault(entry["item"], str(entry.get("verdict")))
    keys = {key for by_key in drawn.values() for key in by_key}
    if not keys:
        return drawn
    items = Item.objects.filter(study=study, key__in=keys)
    if t2i_model:
        items = items.filter(t2i_model=t2i_model)
    present = set(items.values_list("key", flat=True))
    return {
        attribute: {k: v for k, v in by_key.items() if k in present} for attribute, by_key in drawn.items()
    }


def final_answers(
    study: Study, *, keys: Iterable[str], labels: Mapping[str, Mapping[str, str]]
) -> dict[tuple[str, str], str]:
    """(item key, attribute) -> the human final answer as a verdict label, for the items named;
    QuestionMismatch for an answer outside the question's choices."""
    answers: dict[tuple[str, str], str] = {}
    keys = list(keys)
    if not keys:
        return answers
    for key, question, value in FinalLabel.objects.filter(
        item__study=study, item__key__in=keys, question__key__in=pc.ATTRIBUTES
    ).values_list("item__key", "question__key", "value"):
        label = labels[question].get(value)
        if label is None:
            raise QuestionMismatch(
                f"pair '{key}': final answer {value!r} to '{question}' is not one of its choices"
            )
        answers[(key, question)] = label
    return answers


def sample_summaries(study: Study) -> list[dict[str, Any]]:
    """Each draw on the study without its item list: attribute, seed, buckets, T2I model,
    source, how many pairs, when."""
    return [
        {key: record.get(key) for key in ("attribute", "seed", "buckets", "t2i_model", "source")}
        | {"n_items": len(record.get("items") or []), "drawn_at": record.get("drawn_at")}
        for record in study_samples(study)
    ]


@dataclass
class PairAnswers:
    """What people said about one pair: every annotator's answer per question (question key ->
    [(username, value display, value)]) and the final answer per question."""

    labels: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    finals: dict[str, tuple[str, str]] = field(default_factory=dict)


def pair_answers(study: Study, item_ids: Iterable[int]) -> dict[int, PairAnswers]:
    """item id -> its labels and final answers (question values and their display names). Two
    queries."""
    ids = list(item_ids)
    questions = {q.key: q for q in study_questions(study)}
    answers: dict[int, PairAnswers] = defaultdict(PairAnswers)
    if not ids:
        return {}
    for item_id, key, username, value in (
        Label.objects.filter(item_id__in=ids)
        .values_list("item_id", "question__key", "annotator__username", "value")
        .order_by("question__position", "annotator__username")
    ):
        shown = questions[key].display(value) if key in questions else value
        answers[item_id].labels.setdefault(key, []).append((username, shown, value))
    for item_id, key, value in FinalLabel.objects.filter(item_id__in=ids).values_list(
        "item_id", "question__key", "value"
    ):
        shown = questions[key].display(value) if key in questions else value
        answers[item_id].finals[key] = (shown, value)
    return dict(answers)
