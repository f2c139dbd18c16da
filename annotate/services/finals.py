"""Final labels: agreed ones follow the labels; a decision or an import fixes one. Revisions kept."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from django.db import connection, transaction
from django.utils import timezone

from annotate import sql as rows
from annotate.errors import AlreadyResolved, InvalidLabel
from annotate.models import FinalLabel, FinalLabelRevision, FinalLabelSource
from annotate.selectors import DECIDED_SOURCES
from annotate.services import locks
from annotate.services.answers import answer_validate
from metrics.consensus import agreed_answer
from studies.models import INFERENCE_RULES, Item, Question, Study

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def refuse_if_decided(item: Item, question: Question, final: FinalLabel | None) -> None:
    if final is not None and final.source in DECIDED_SOURCES:
        who = "an import" if final.source == FinalLabelSource.IMPORTED else "a researcher"
        raise AlreadyResolved(
            f"The final answer to “{question.key}” for item {item.key} was already set to "
            f"“{question.display(final.value)}” by {who}; its labels can no longer change."
        )


class _Final(Protocol):
    value: str
    source: str


def agreed_change(
    study: Study, final: _Final | None, values: list[str], changed_by: User
) -> tuple[str | None, str] | None:
    """What the labels' ``values`` do to an (item, question)'s final answer ``final``: None
    (nothing), (value, note) to set the agreed one, (None, note) to remove it."""
    if final is not None and final.source != FinalLabelSource.AGREED:
        return None
    if study.agreement in INFERENCE_RULES:
        return None  # a model's final answers come from all the labels at once (recompute_finals)
    value = agreed_answer(values, needed=study.labels_per_item, rule=study.agreement)
    if value is None:
        if final is None:
            return None
        return None, f"Agreement broken: {changed_by.get_username()} changed their label."
    if final is not None and final.value == value:
        return None
    n_same = values.count(value)
    how_many = "All" if n_same == len(values) else f"{n_same} of"
    return value, f"{how_many} {len(values)} annotators chose “{value}”."


def _final_revision_append(final: FinalLabel) -> None:
    FinalLabelRevision.objects.create(
        item_id=final.item_id,
        question_id=final.question_id,
        value=final.value,
        source=final.source,
        decided_by=final.decided_by,
        note=final.note,
        decided_at=final.decided_at,
    )


def _final_label_insert(final: FinalLabel) -> None:
    """Insert a new agreed final label and its first revision in plain SQL (one statement on PostgreSQL)."""
    sql, params = rows.insert(FinalLabel, rows.FINAL_FIELDS, [final])
    with connection.cursor() as cursor:
        if rows.is_postgresql():
            cursor.execute(rows.final_with_revision(sql), params)
        else:
            cursor.execute(sql, params)
            revision_sql, revision_params = rows.insert(FinalLabelRevision, rows.FINAL_FIELDS, [final])
            cursor.execute(revision_sql, revision_params)


def final_label_sync(
    *,
    item: Item,
    study: Study,
    question: Question,
    final: FinalLabel | None,
    values: list[str],
    changed_by: User,
    now: datetime,
) -> None:
    """Set or remove the agreed final answer of (item, question) from its labels' values."""
    change = agreed_change(study, final, values, changed_by)
    if change is None:
        return
    value, note = change
    fields = {
        "value": value or "",
        "source": FinalLabelSource.AGREED,
        "decided_by": None,
        "note": note,
        "decided_at": now,
    }
    if final is None:
        _final_label_insert(FinalLabel(item=item, question=question, **fields))
    elif value is None:
        final.delete()
        # A removal's revision: no value, the source of the answer removed (agreed), never "".
        _final_revision_append(FinalLabel(item=item, question=question, **fields))
    else:
        for name, field_value in fields.items():
            setattr(final, name, field_value)
        final.save(update_fields=list(fields))
        _final_revision_append(final)


@transaction.atomic
def final_label_set(
    *,
    item: Item,
    question: Question,
    value: str,
    decided_by: User | None,
    note: str = "",
    source: str = FinalLabelSource.IMPORTED,
    check: Callable[[Item], None] | None = None,
) -> FinalLabel:
    """Set an (item, question)'s final answer directly once ``check`` passes; history kept."""
    item = locks.lock_item(item)
    if question.study_id != item.study_id:
        raise InvalidLabel(
            f"The question “{question.key}” is not a question of the study of item {item.key}."
        )
    value = answer_validate(question, value, item=item)
    if source not in FinalLabelSource.values:
        raise InvalidLabel(f"“{source}” is not a final label source ({', '.join(FinalLabelSource.values)}).")
    if check is not None:
        check(item)
    note = (note or "").strip()
    final = FinalLabel.objects.filter(item=item, question=question).first()
    if final is not None and (final.value, final.source, final.decided_by_id, final.note) == (
        value,
        source,
        getattr(decided_by, "pk", None),
        note,
    ):
        return final
    final, _ = FinalLabel.objects.update_or_create(
        item=item,
        question=question,
        defaults={
            "value": value,
            "source": source,
            "decided_by": decided_by,
            "note": note,
            "decided_at": timezone.now(),
            "posterior": None,
        },
    )
    _final_revision_append(final)
    return final
