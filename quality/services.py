"""Writes of quality control: gold items in, annotators excluded and re-included.

Each is one transaction raising user-facing domain errors; changed final labels get a revision.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotate import selectors as annotate_selectors
from annotate.errors import InvalidLabel
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, FinalLabelSource, Label, LabelRevision
from annotate.services.answers import answer_validate
from annotate.services.claims import seat_try_claim
from metrics.consensus import agreed_answer
from metrics.truth import infer_truth
from quality.errors import QualityError
from quality.models import AnnotatorExclusion, ExcludedLabel, InferredReliability
from studies.batching import in_chunks, in_rows
from studies.errors import ImportRejected
from studies.imports.rows import csv_rows_stream
from studies.models import INFERENCE_RULES, AgreementRule, GoldAnswer, Item, ItemImage, Question, Study
from studies.selectors import item_questions, study_questions

if TYPE_CHECKING:
    from django.contrib.auth.models import User

GOLD_COLUMNS = ("image", "question", "answer")


# --- gold items --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldImport:
    """What ``gold_import`` stored: gold items and gold answers (new or changed)."""

    items: int
    answers: int


def _gold_rows(path: str | os.PathLike[str]) -> list[tuple[int, str, str, str]]:
    """(line, image, question, answer) of every row, read as every import reads its CSV
    (``studies.imports.csv_rows_stream``); ImportRejected for an unreadable file, a missing
    column or a row with more cells than the header."""
    _header, rows = csv_rows_stream(path, required=GOLD_COLUMNS)
    read = []
    for number, row in rows:
        if "__error__" in row:
            raise ImportRejected(f"{Path(path).name} row {number}: {row['__error__']}; nothing was imported.")
        read.append((number, row["image"], row["question"], row["answer"]))
    return read


def _gold_problem(item: Item, n_labels: int, decided: bool) -> str:
    """Why the item cannot become a gold item from a file ("" when it can): it is still being
    labelled, or a researcher or an import set its final answer."""
    if decided:
        return (
            f"item '{item.key}' has a final answer set by a researcher or an import: "
            "use “Use as gold item” on its page to make a resolved item gold with its resolution"
        )
    if n_labels and item.completed_seats < item.study.labels_per_item:
        return (
            f"item '{item.key}' is still being labelled ({item.completed_seats} of "
            f"{item.study.labels_per_item} seats): make it gold before anyone labels it, or once its labels are in"
        )
    return ""


def _gold_states(item_ids: list[int]) -> tuple[dict[int, int], set[int]]:
    """(item id → how many labels it has, the items with a researcher's or an import's final)."""
    labels = dict(
        Label.objects.filter(item_id__in=item_ids)
        .order_by()
        .values("item_id")
        .annotate(n=Count("pk"))
        .values_list("item_id", "n")
    )
    decided = set(
        FinalLabel.objects.filter(item_id__in=item_ids)
        .exclude(source=FinalLabelSource.AGREED)
        .values_list("item_id", flat=True)
    )
    return labels, decided


@transaction.atomic
def gold_mark(*, item: Item) -> GoldImport:
    """Make a settled item a gold item, its final answers its gold answers. QualityError when a
    question has no usable final answer, the item is being labelled or has an imported one."""
    finals = list(FinalLabel.objects.filter(item=item).select_related("question"))
    labels, _decided = _gold_states([item.pk])
    problem = _gold_problem(item, labels.get(item.pk, 0), decided=False)
    if not problem and any(final.source == FinalLabelSource.IMPORTED for final in finals):
        problem = (
            f"item '{item.key}' has an imported final answer: import_gold takes known answers from a file"
        )
    if not problem and not finals:
        problem = f"item '{item.key}' has no agreed or resolved final answer to use as its gold answer"
    if not problem:
        answered = {final.question_id for final in finals}
        missing = [question.key for question in item_questions(item) if question.pk not in answered]
        unresolvable = [
            final.question.key
            for final in finals
            if final.question.unresolvable_value and final.value == final.question.unresolvable_value
        ]
        if missing:
            problem = f"item '{item.key}' has no final answer to {', '.join(missing)} yet"
        elif unresolvable:
            problem = (
                f"item '{item.key}' was settled as unresolvable on {', '.join(unresolvable)}: "
                "there is no answer to check annotators against"
            )
    if problem:
        raise QualityError(problem[0].upper() + problem[1:] + ".")
    written = 0
    for final in finals:
        _, created = GoldAnswer.objects.update_or_create(
            item=item, question_id=final.question_id, defaults={"value": final.value}
        )
        written += created
    # Reservations nobody answered would otherwise come back as gold seats of the item.
    Assignment.objects.filter(item=item, completed_at__isnull=True).delete()
    Item.objects.filter(pk=item.pk).update(queue=0)
    return GoldImport(items=1, answers=written)


def _items_named(study: Study, names: set[str]) -> dict[str, Item]:
    """The study's items by image path (manifest ``image``) or by item key."""
    found: dict[str, Item] = {
        item.key: item for item in in_rows(Item.objects.filter(study=study), "key", names)
    }
    links = ItemImage.objects.filter(item__study=study).select_related("item")
    for link in in_rows(links, "source_path", names):
        found.setdefault(link.source_path, link.item)
    return found


@transaction.atomic
def gold_import(*, study: Study, csv_path: str | os.PathLike[str]) -> GoldImport:
    """Make the named items gold items with their known answers (CSV ``image``, ``question``,
    ``answer``). Any bad row raises ImportRejected naming the first one, and nothing is written."""
    name = Path(csv_path).name
    rows = _gold_rows(csv_path)
    if not rows:
        raise ImportRejected(f"{name}: no rows")
    items = _items_named(study, {image for _, image, _, _ in rows})
    questions = {question.key: question for question in study_questions(study)}
    labels, decided = _gold_states([item.pk for item in items.values()])
    problems: list[str] = []
    wanted: dict[tuple[int, int], tuple[Item, Question, str]] = {}
    for line, image, key, answer in rows:
        item, question = items.get(image), questions.get(key)
        problem = ""
        if item is None:
            problem = f"unknown image '{image}' (no item of study '{study.slug}' has that path or key)"
        elif question is None:
            problem = f"unknown question '{key}' (the study asks: {', '.join(questions)})"
        elif question not in item_questions(item, list(questions.values())):
            problem = f"item '{image}' does not ask the question '{key}'"
        elif blocked := _gold_problem(item, labels.get(item.pk, 0), item.pk in decided):
            problem = blocked
        elif (item.pk, question.pk) in wanted:
            problem = f"a second gold answer for '{image}', question '{key}'"
        else:
            try:
                answer = answer_validate(question, answer, item=item)
            except InvalidLabel as exc:
                problem = str(exc)
        if problem:
            problems.append(f"{name} row {line}: {problem}")
            continue
        assert item is not None
        assert question is not None
        wanted[(item.pk, question.pk)] = (item, question, answer)
    if problems:
        more = f" ({len(problems) - 1} more bad row(s))" if len(problems) > 1 else ""
        raise ImportRejected(f"{problems[0]}{more}; nothing was imported.")
    existing = {
        (gold.item_id, gold.question_id): gold
        for gold in GoldAnswer.objects.filter(item__in={item.pk for item, _, _ in wanted.values()})
    }
    written = 0
    for pair, (item, question, answer) in wanted.items():
        gold = existing.get(pair)
        if gold is None:
            GoldAnswer.objects.create(item=item, question=question, value=answer)
        elif gold.value != answer:
            gold.value = answer
            gold.save(update_fields=["value"])
        else:
            continue
        written += 1
    item_ids = {item.pk for item, _, _ in wanted.values()}
    Item.objects.filter(pk__in=item_ids).update(queue=0)
    return GoldImport(items=len(item_ids), answers=written)


# --- exclusion ---------------------------------------------------------------------------------


def _seats_recount(item_ids: list[int]) -> None:
    completed = (
        Assignment.objects.filter(item=OuterRef("pk"), completed_at__isnull=False)
        .order_by()
        .values("item")
        .annotate(n=Count("pk"))
        .values("n")
    )
    for chunk in in_chunks(item_ids):
        Item.objects.filter(pk__in=chunk).update(
            completed_seats=Coalesce(Subquery(completed, output_field=IntegerField()), Value(0))
        )


Pair = tuple[int, int]  # (item id, question id)


def _final_apply(
    *,
    pair: Pair,
    final: FinalLabel | None,
    value: str | None,
    posterior: float | None,
    note: str,
    now: datetime,
) -> bool:
    """Bring one agreed final label to ``value`` (None: no final label) with ``posterior``,
    appending a revision; researchers' and imported ones are left alone. Whether it changed."""
    if final is not None and final.source != FinalLabelSource.AGREED:
        return False
    if final is None and value is None:
        return False
    if final is not None and (final.value, final.posterior) == (value, posterior):
        return False
    item_id, question_id = pair
    if value is None:
        assert final is not None
        final.delete()
    else:
        FinalLabel.objects.update_or_create(
            item_id=item_id,
            question_id=question_id,
            defaults={
                "value": value,
                "source": FinalLabelSource.AGREED,
                "decided_by": None,
                "note": note,
                "decided_at": now,
                "posterior": posterior,
            },
        )
    FinalLabelRevision.objects.create(
        item_id=item_id,
        question_id=question_id,
        value=value or "",
        source=FinalLabelSource.AGREED,
        note=note,
        decided_at=now,
    )
    return True


def _finals_recompute(*, study: Study, item_ids: list[int], note: str) -> int:
    """Bring the agreed final labels of these items in step with their labels as they are now
    (the study's rule; a truth-inference rule reruns its model over the whole study);
    researchers' and imported ones stay. How many changed."""
    if study.agreement in INFERENCE_RULES:
        return _finals_infer(study=study, note=note)
    now = timezone.now()
    changed = 0
    for chunk in in_chunks(item_ids):
        values: dict[Pair, list[str]] = defaultdict(list)
        for item_id, question_id, value in Label.objects.filter(item_id__in=chunk).values_list(
            "item_id", "question_id", "value"
        ):
            values[(item_id, question_id)].append(value)
        finals = {(f.item_id, f.question_id): f for f in FinalLabel.objects.filter(item_id__in=chunk)}
        for pair in sorted(set(values) | set(finals)):
            agreed = agreed_answer(values.get(pair, []), needed=study.labels_per_item, rule=study.agreement)
            changed += _final_apply(
                pair=pair, final=finals.get(pair), value=agreed, posterior=None, note=note, now=now
            )
    return changed


METHOD_NAMES = {"dawid_skene": "Dawid-Skene", "glad": "GLAD", "mace": "MACE"}


def _finals_infer(*, study: Study, note: str = "") -> int:
    """Agreed final labels from the study's truth-inference model (``metrics.truth``) where the
    posterior reaches ``study.min_posterior``; stores annotator reliabilities. Returns the changes."""
    method = study.agreement
    now = timezone.now()
    by_question: dict[int, list[tuple[Pair, str, str]]] = defaultdict(list)
    user_ids: dict[str, int] = {}
    for item_id, question_id, user_id, username, value in Label.objects.filter(item__study=study).values_list(
        "item_id", "question_id", "annotator_id", "annotator__username", "value"
    ):
        by_question[question_id].append(((item_id, question_id), username, value))
        user_ids[username] = user_id
    questions = {question.pk: question for question in study_questions(study)}
    targets: dict[Pair, tuple[str | None, float | None, str]] = {}
    reliability: dict[str, list[tuple[float, int]]] = defaultdict(list)
    confusion: dict[str, dict[str, Any]] = defaultdict(dict)
    name = METHOD_NAMES[method]
    for question_id, rows in by_question.items():
        question = questions[question_id]
        inference = infer_truth(rows, method, question.values)
        counts = Counter(pair for pair, _, _ in rows)
        for pair, n in counts.items():
            answer, posterior = inference.answers[pair], inference.posteriors[pair]
            if n < study.labels_per_item:
                continue
            if posterior >= study.min_posterior:
                targets[pair] = (answer, posterior, f"{name}: posterior {posterior:.3f} over {n} labels.")
            else:
                targets[pair] = (
                    None,
                    None,
                    f"{name}: “{answer}” only {posterior:.3f} < {study.min_posterior}: a dispute.",
                )
        given = Counter(worker for _, worker, _ in rows)
        for worker, share in inference.reliability.items():
            reliability[worker].append((share, given[worker]))
            answers, matrix = inference.confusion[worker]
            confusion[worker][question.key] = {
                "answers": list(answers),
                "counts": [list(row) for row in matrix],
            }
    changed = 0
    finals = {
        (f.item_id, f.question_id): f
        for f in FinalLabel.objects.filter(item__study=study, source=FinalLabelSource.AGREED)
    }
    for pair in sorted(set(targets) | set(finals)):
        target, chance, why = targets.get(pair, (None, None, note or f"{name}: labeling not finished."))
        changed += _final_apply(
            pair=pair, final=finals.get(pair), value=target, posterior=chance, note=why, now=now
        )
    InferredReliability.objects.filter(study=study).delete()
    InferredReliability.objects.bulk_create(
        InferredReliability(
            study=study,
            annotator_id=user_ids[worker],
            method=method,
            reliability=sum(v * n for v, n in parts) / sum(n for _, n in parts),
            confusion=confusion[worker],
        )
        for worker, parts in reliability.items()
    )
    return changed


@dataclass(frozen=True)
class Recomputed:
    """What ``finals_recompute`` did: the rule now, final labels changed, and how the study's
    finished (item, question)s stand: with an agreed final label, or disputed."""

    rule: str
    changed: int
    agreed: int
    disputed: int


@transaction.atomic
def finals_recompute(
    *, study: Study, actor: str, rule: str | None = None, min_posterior: float | None = None
) -> Recomputed:
    """Set the aggregation rule (and minimum posterior) when given, then recompute every agreed
    final label by it. QualityError for an unknown rule, N < 3 for majority, posterior not in (0, 1]."""
    if rule is not None:
        if rule not in AgreementRule.values:
            raise QualityError(f"Unknown aggregation rule “{rule}” ({', '.join(AgreementRule.values)}).")
        if rule == AgreementRule.MAJORITY and study.labels_per_item < 3:
            raise QualityError("A majority needs at least 3 labels per item.")
        study.agreement = rule
    if min_posterior is not None:
        if not 0 < min_posterior <= 1:
            raise QualityError(f"--min-posterior must be above 0 and at most 1, not {min_posterior}.")
        study.min_posterior = min_posterior
    study.save(update_fields=["agreement", "min_posterior"])
    note = f"Recomputed by {actor} with the rule {study.agreement}."
    if study.agreement in INFERENCE_RULES:
        changed = _finals_infer(study=study, note=note)
    else:
        InferredReliability.objects.filter(study=study).delete()
        labelled = Label.objects.filter(item__study=study).values_list("item_id", flat=True)
        finals = FinalLabel.objects.filter(item__study=study, source=FinalLabelSource.AGREED)
        item_ids = sorted(set(labelled) | set(finals.values_list("item_id", flat=True)))
        changed = _finals_recompute(study=study, item_ids=item_ids, note=note)
    agreed = FinalLabel.objects.filter(item__study=study, source=FinalLabelSource.AGREED).count()
    disputed = len(annotate_selectors.dispute_pairs(study=study))
    return Recomputed(rule=study.agreement, changed=changed, agreed=agreed, disputed=disputed)


def _items_lock(item_ids: list[int]) -> None:
    """Lock the items' rows in ascending id order, as every label writer does (no deadlock)."""
    list(in_rows(Item.objects.select_for_update(no_key=True).order_by("pk"), "pk", sorted(item_ids), "pk"))


@transaction.atomic
def annotator_exclude(*, study: Study, annotator: User, actor: str, reason: str = "") -> AnnotatorExclusion:
    """Take the annotator out of the study: labels to ``ExcludedLabel``, seats freed, final labels
    recomputed without them. QualityError when they are excluded already."""
    if AnnotatorExclusion.objects.filter(study=study, annotator=annotator, included_at__isnull=True).exists():
        raise QualityError(f"{annotator.get_username()} is already excluded from the study “{study.slug}”.")
    gold_items = GoldAnswer.objects.filter(item__study=study).values("item_id")
    seats = Assignment.objects.filter(item__study=study, annotator=annotator).exclude(item_id__in=gold_items)
    seat_at = dict(seats.values_list("item_id", "completed_at"))
    labels = list(
        Label.objects.filter(item__study=study, annotator=annotator).order_by("item_id", "question_id")
    )
    item_ids = sorted(set(seat_at) | {label.item_id for label in labels})
    _items_lock(item_ids)
    history: dict[int, list[dict[str, object]]] = defaultdict(list)
    revisions = LabelRevision.objects.order_by("changed_at", "id")
    for revision in in_rows(revisions, "label_id", [label.pk for label in labels]):
        history[revision.label_id].append(
            {
                "value": revision.value,
                "reason": revision.reason,
                "changed_by": revision.changed_by_id,
                "changed_at": revision.changed_at.isoformat(),
                "request_id": revision.request_id,
            }
        )
    exclusion = AnnotatorExclusion.objects.create(
        study=study, annotator=annotator, reason=reason, excluded_by=actor[:200], labels_moved=len(labels)
    )
    ExcludedLabel.objects.bulk_create(
        ExcludedLabel(
            exclusion=exclusion,
            item_id=label.item_id,
            question_id=label.question_id,
            value=label.value,
            reason=label.reason,
            duration_ms=label.duration_ms,
            request_id=label.request_id,
            labelled_at=label.created_at,
            completed_at=seat_at.get(label.item_id),
            revisions=history[label.pk],
        )
        for label in labels
    )
    for chunk in in_chunks([label.pk for label in labels]):
        Label.objects.filter(pk__in=chunk).delete()
    seats.delete()
    _seats_recount(item_ids)
    exclusion.finals_changed = _finals_recompute(
        study=study,
        item_ids=item_ids,
        note=f"{annotator.get_username()} excluded by {actor}: their labels no longer count.",
    )
    exclusion.save(update_fields=["finals_changed"])
    study.annotators.remove(annotator)
    return exclusion


@transaction.atomic
def annotator_include(*, study: Study, annotator: User, actor: str) -> AnnotatorExclusion:
    """Undo the exclusion: labels come back where the seat is still free, final labels
    recomputed. QualityError when they are not excluded."""
    exclusion = AnnotatorExclusion.objects.filter(
        study=study, annotator=annotator, included_at__isnull=True
    ).first()
    if exclusion is None:
        raise QualityError(f"{annotator.get_username()} is not excluded from the study “{study.slug}”.")
    now = timezone.now()
    archived: dict[int, list[ExcludedLabel]] = defaultdict(list)
    for row in exclusion.labels.order_by("item_id", "question_id"):
        archived[row.item_id].append(row)
    _items_lock(list(archived))
    returned: list[int] = []
    for item_id, rows in archived.items():
        seat = seat_try_claim(
            item=Item(pk=item_id),
            annotator=annotator,
            n=study.labels_per_item,
            now=now,
            expires_at=now + timedelta(seconds=study.claim_timeout_seconds),
            completed=True,
        )
        if seat is None:
            continue
        if rows[0].completed_at is not None:
            Assignment.objects.filter(pk=seat.pk).update(completed_at=rows[0].completed_at)
        for row in rows:
            label = Label.objects.create(
                item_id=item_id,
                question_id=row.question_id,
                annotator=annotator,
                value=row.value,
                reason=row.reason,
                duration_ms=row.duration_ms,
                request_id=row.request_id,
            )
            Label.objects.filter(pk=label.pk).update(created_at=row.labelled_at)
            for revision in row.revisions:
                made = LabelRevision.objects.create(
                    label=label,
                    value=revision["value"],
                    reason=revision["reason"],
                    changed_by_id=revision["changed_by"],
                    request_id=revision["request_id"],
                )
                LabelRevision.objects.filter(pk=made.pk).update(changed_at=revision["changed_at"])
            row.delete()
        returned.append(item_id)
    _seats_recount(returned)
    _finals_recompute(
        study=study,
        item_ids=returned,
        note=f"{annotator.get_username()} re-included by {actor}: their labels count again.",
    )
    exclusion.included_at = now
    exclusion.included_by = actor[:200]
    exclusion.labels_returned = sum(len(archived[item_id]) for item_id in returned)
    exclusion.save(update_fields=["included_at", "included_by", "labels_returned"])
    study.annotators.add(annotator)
    return exclusion
