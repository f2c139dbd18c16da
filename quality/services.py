"""Writes of quality control: gold items in, annotators excluded and re-included.

Every function is one transaction with keyword-only arguments and raises domain errors whose
message is meant for the user. Final labels changed here append a revision saying why.
"""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotate.errors import InvalidLabel
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, FinalLabelSource, Label, LabelRevision
from annotate.services.answers import answer_validate
from annotate.services.claims import seat_try_claim
from metrics.consensus import agreed_answer
from quality.errors import QualityError
from quality.models import AnnotatorExclusion, ExcludedLabel
from studies.batching import in_chunks
from studies.csvio import read_cell
from studies.errors import ImportRejected
from studies.models import GoldAnswer, Item, ItemImage, Question, Study
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
    """(line, image, question, answer) of every row; ImportRejected for an unreadable file or
    a missing column."""
    name = Path(path).name
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in reader.fieldnames or []]
            missing = [c for c in GOLD_COLUMNS if c not in header]
            if missing:
                raise ImportRejected(
                    f"{name}: missing column(s) {', '.join(missing)} (needs image, question, answer)"
                )
            reader.fieldnames = header
            return [
                (
                    reader.line_num,
                    read_cell(row.get("image")),
                    read_cell(row.get("question")),
                    read_cell(row.get("answer")),
                )
                for row in reader
            ]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ImportRejected(f"{name}: cannot read it as a UTF-8 CSV ({exc})") from exc


def _items_named(study: Study, names: set[str]) -> dict[str, Item]:
    """The study's items by image path (manifest ``image``) or by item key."""
    found: dict[str, Item] = {}
    for chunk in in_chunks(names):
        for item in Item.objects.filter(study=study, key__in=chunk):
            found[item.key] = item
        for link in ItemImage.objects.filter(item__study=study, source_path__in=chunk).select_related("item"):
            found.setdefault(link.source_path, link.item)
    return found


@transaction.atomic
def gold_import(*, study: Study, csv_path: str | os.PathLike[str]) -> GoldImport:
    """Make the named items gold items of the study with their known answers (CSV columns
    ``image`` — the item's image path or key —, ``question``, ``answer``). A gold item leaves
    the ordinary queue. Every row is checked first: an unknown image, question or answer, an
    item somebody already labelled, or a row repeating another raises ImportRejected naming the
    first bad row; then nothing is written."""
    name = Path(csv_path).name
    rows = _gold_rows(csv_path)
    if not rows:
        raise ImportRejected(f"{name}: no rows")
    items = _items_named(study, {image for _, image, _, _ in rows})
    questions = {question.key: question for question in study_questions(study)}
    labelled = set(
        Label.objects.filter(item__in=[item.pk for item in items.values()]).values_list("item_id", flat=True)
    )
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
        elif item.pk in labelled:
            problem = f"item '{image}' already has labels: a gold item must be one nobody labelled"
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


def _finals_recompute(*, study: Study, item_ids: list[int], note: str) -> int:
    """Bring the agreed final labels of these items in step with their labels as they are now
    (the study's rule); researchers' and imported ones stay. How many changed."""
    now = timezone.now()
    changed = 0
    for chunk in in_chunks(item_ids):
        values: dict[tuple[int, int], list[str]] = defaultdict(list)
        for item_id, question_id, value in Label.objects.filter(item_id__in=chunk).values_list(
            "item_id", "question_id", "value"
        ):
            values[(item_id, question_id)].append(value)
        finals = {(f.item_id, f.question_id): f for f in FinalLabel.objects.filter(item_id__in=chunk)}
        for pair in set(values) | set(finals):
            final = finals.get(pair)
            if final is not None and final.source != FinalLabelSource.AGREED:
                continue
            agreed = agreed_answer(values.get(pair, []), needed=study.labels_per_item, rule=study.agreement)
            if (final.value if final else None) == agreed:
                continue
            changed += 1
            item_id, question_id = pair
            if agreed is None:
                assert final is not None
                final.delete()
                FinalLabelRevision.objects.create(
                    item_id=item_id,
                    question_id=question_id,
                    value="",
                    source=FinalLabelSource.AGREED,
                    note=note,
                    decided_at=now,
                )
                continue
            final, _ = FinalLabel.objects.update_or_create(
                item_id=item_id,
                question_id=question_id,
                defaults={
                    "value": agreed,
                    "source": FinalLabelSource.AGREED,
                    "note": note,
                    "decided_at": now,
                },
            )
            FinalLabelRevision.objects.create(
                item_id=item_id,
                question_id=question_id,
                value=agreed,
                source=FinalLabelSource.AGREED,
                note=note,
                decided_at=now,
            )
    return changed


def _items_lock(item_ids: list[int]) -> None:
    """Lock the items' rows in ascending id order, as every label writer does (no deadlock)."""
    for chunk in in_chunks(sorted(item_ids)):
        list(
            Item.objects.select_for_update(no_key=True).filter(pk__in=chunk).order_by("pk").values_list("pk")
        )


@transaction.atomic
def annotator_exclude(*, study: Study, annotator: User, actor: str, reason: str = "") -> AnnotatorExclusion:
    """Take the annotator out of the study: their labels (with their history) move to
    ``ExcludedLabel``, their seats on ordinary items are freed for others, the agreed final
    labels of those items are recomputed without them (each change a revision naming the
    exclusion; disputes follow, they are derived) and they may no longer label it. Their gold
    answers stay. QualityError when they are excluded already."""
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
    for chunk in in_chunks([label.pk for label in labels]):
        for revision in LabelRevision.objects.filter(label_id__in=chunk).order_by("changed_at", "id"):
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
    """Undo the annotator's exclusion: they may label the study again and their labels come
    back, with their history, on every item where a seat is still free (the others stay with
    the exclusion: someone else took the seat meanwhile); the agreed final labels of those items
    are recomputed. QualityError when they are not excluded."""
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
