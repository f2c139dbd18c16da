"""The bulk label path of the imports (annotate.services.bulk, issue 23): the same rules and the
same rows written as ``label_import`` one row at a time, with a number of statements that does
not grow with the batch, each under the variable limit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotate import services
from annotate.errors import AnnotateError
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, Label, LabelRevision
from studies.models import Item, ItemImage
from tests.annotate.gender import final_set, label_import
from tests.factories import ItemFactory, PromptFactory, StudyFactory, UserFactory, question_of
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

pytestmark = pytest.mark.django_db


class _Undo(Exception):
    pass


def _snapshot(study):
    """Everything a label import writes, without ids and times."""
    return {
        "labels": sorted(
            Label.objects.filter(item__study=study).values_list(
                "item__key", "annotator__username", "value", "reason"
            )
        ),
        "label revisions": sorted(
            LabelRevision.objects.filter(label__item__study=study).values_list(
                "label__item__key", "label__annotator__username", "value", "reason", "changed_by__username"
            )
        ),
        "finals": sorted(
            FinalLabel.objects.filter(item__study=study).values_list("item__key", "value", "source", "note")
        ),
        "final revisions": list(
            FinalLabelRevision.objects.filter(item__study=study)
            .order_by("id")
            .values_list("item__key", "value", "source", "note")
        ),
        "seats": sorted(
            (key, name, slot, done is not None)
            for key, name, slot, done in Assignment.objects.filter(item__study=study).values_list(
                "item__key", "annotator__username", "slot", "completed_at"
            )
        ),
        "completed seats": sorted(Item.objects.filter(study=study).values_list("key", "completed_seats")),
        "annotators": sorted(study.annotators.values_list("username", flat=True)),
    }


def _run(study, rows, *, bulk: bool):
    """Apply the rows (bulk or one by one), snapshot, and undo: (outcomes, snapshot)."""
    try:
        with transaction.atomic():
            if bulk:
                outcomes = services.labels_import_batch(
                    study=study,
                    rows=[
                        services.LabelToImport(item, question_of(item), user, value, reason)
                        for item, user, value, reason in rows
                    ],
                )
                shown = [str(o) if isinstance(o, AnnotateError) else o for o in outcomes]
            else:
                shown = []
                for item, user, value, reason in rows:
                    before = Label.objects.filter(item=item, annotator=user).first()
                    try:
                        label_import(item=item, annotator=user, value=value, reason=reason)
                    except AnnotateError as exc:
                        shown.append(str(exc))
                        continue
                    shown.append("created" if before is None else "changed")
            snapshot = _snapshot(study)
            raise _Undo
    except _Undo:
        pass
    return shown, snapshot


def test_a_batch_writes_what_label_import_writes_row_by_row_and_refuses_the_same_rows(
    study, annotator_a, annotator_b, researcher
):
    cleo, dora = UserFactory(username="cleo"), UserFactory(username="dora")
    items = [ItemFactory(study=study, prompt=PromptFactory(study=study)) for _ in range(6)]
    now = timezone.now()
    final_set(item=items[2], value="female", decided_by=researcher)  # decided: labels refused
    Assignment.objects.create(  # cleo's open seat, still reserved: her label completes it
        item=items[3], annotator=cleo, slot=0, claimed_at=now, expires_at=now + timedelta(hours=1)
    )
    label_import(item=items[4], annotator=annotator_a, value="male")
    Assignment.objects.create(  # dora's abandoned seat: freed for ben
        item=items[4], annotator=dora, slot=1, claimed_at=now, expires_at=now - timedelta(hours=1)
    )
    label_import(item=items[5], annotator=annotator_a, value="male")
    label_import(item=items[5], annotator=annotator_b, value="male")  # agreed
    rows = [
        (items[0], annotator_a, "male", ""),
        (items[0], annotator_b, "male", ""),  # agreement: an agreed final label
        (items[0], cleo, "male", ""),  # both seats taken: ItemFull naming anna and ben
        (items[1], annotator_a, "maybe", ""),  # not a label
        (items[2], annotator_a, "male", ""),  # decided by a researcher
        (items[3], cleo, "female", ""),
        (items[4], annotator_b, "female", ""),
        (items[5], annotator_a, "female", ""),  # a change breaks the agreement
        (items[1], annotator_b, " female ", "a reason nobody asked for"),
    ]
    one_by_one = _run(study, rows, bulk=False)
    in_bulk = _run(study, rows, bulk=True)
    assert in_bulk == one_by_one
    outcomes, snapshot = in_bulk
    assert outcomes[:3] == [
        "created",
        "created",
        f"Item {items[0].key} already has its 2 annotators (anna, ben).",
    ]
    assert outcomes[5:] == ["created", "created", "changed", "created"]
    assert "dora" not in {name for _, name, _, _ in snapshot["seats"]}
    assert (items[5].key, "", "agreed", "Agreement broken: anna changed their label.") in snapshot[
        "final revisions"
    ]


def test_an_unchanged_row_writes_nothing(study, annotator_a):
    item = ItemFactory(study=study)
    label_import(item=item, annotator=annotator_a, value="male")
    row = services.LabelToImport(item, question_of(item), annotator_a, "male")
    with CaptureQueriesContext(connection) as queries:
        assert services.labels_import_batch(study=study, rows=[row]) == ["unchanged"]
    assert not [q for q in queries.captured_queries if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))]
    assert LabelRevision.objects.count() == 1


def _many(study, n):
    prompt = PromptFactory(study=study)
    first = ItemFactory(prompt=prompt, key="k/0000.png")
    image = ItemImage.objects.get(item=first).image
    items = [
        first,
        *Item.objects.bulk_create(
            [Item(study=study, prompt=prompt, key=f"k/{i:04d}.png") for i in range(1, n)]
        ),
    ]
    ItemImage.objects.bulk_create([ItemImage(item=i, image=image, role="image") for i in items[1:]])
    return items


def _two_labels_each(items, *users):
    question = question_of(items[0])
    return [
        services.LabelToImport(item, question, user, "male" if n % 3 else "female")
        for n, item in enumerate(items)
        for user in users
    ]


def test_a_batch_larger_than_the_variable_limit_is_written_with_every_statement_under_it(
    settings, study, annotator_a, annotator_b
):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    items = _many(study, 120)
    with sqlite_variable_limit(LIMIT):
        outcomes = services.labels_import_batch(
            study=study, rows=_two_labels_each(items, annotator_a, annotator_b)
        )
    assert outcomes == ["created"] * 240
    assert Label.objects.count() == LabelRevision.objects.count() == 240
    assert Assignment.objects.filter(completed_at__isnull=False).count() == 240
    assert set(Item.objects.values_list("completed_seats", flat=True)) == {2}
    assert FinalLabel.objects.count() == FinalLabelRevision.objects.count() == 120  # every pair agrees


def test_a_batch_costs_a_few_statements_per_thousand_rows(study, annotator_a, annotator_b):
    items = _many(study, 300)
    counts = []
    for chunk in (items[:30], items[30:]):
        with CaptureQueriesContext(connection) as queries:
            services.labels_import_batch(study=study, rows=_two_labels_each(chunk, annotator_a, annotator_b))
        counts.append(len(queries.captured_queries))
    # 60 rows, then 540: a lock and three reads per chunk of items, then a bulk statement per
    # kind of row written and per ~100-160 rows (the variable limit) — label_import costs a
    # dozen statements per row.
    assert counts[0] <= 20
    assert counts[1] <= 30


def test_a_slot_taken_meanwhile_replays_the_batch_row_by_row(monkeypatch, study, annotator_a, annotator_b):
    """A claim committed between the batch's read and its seat INSERT (PostgreSQL: claims take no
    item lock) makes the INSERT fail: the batch is undone and replayed through label_import,
    whose claim re-reads the slots."""
    from django.db import IntegrityError

    from annotate.services import bulk

    items = _many(study, 3)
    real = bulk.rows_insert
    calls = []

    def seat_conflict_once(model, *args, **kwargs):
        if model is Assignment and not calls:
            calls.append(model)
            real(model, *args, **kwargs)  # written, then refused as a concurrent claim would be
            raise IntegrityError("seat_one_per_slot")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(bulk, "rows_insert", seat_conflict_once)
    outcomes = services.labels_import_batch(
        study=study, rows=_two_labels_each(items, annotator_a, annotator_b)
    )
    assert calls
    assert outcomes == ["created"] * 6
    assert Label.objects.count() == Assignment.objects.count() == 6
    assert FinalLabel.objects.count() == 3


def test_an_answer_repeated_in_a_batch_is_checked_on_each_row_as_label_import_checks_it(
    study, annotator_a, annotator_b
):
    """The batch checks each distinct (question, answer, reason) once, as an import's rows share
    their question: "other" still needs its reason on every row, given on one and missing on
    the next."""
    items = [ItemFactory(study=study, prompt=PromptFactory(study=study)) for _ in range(2)]
    question = question_of(items[0])  # one object for every row, as labels_import passes it
    rows = [
        (items[0], annotator_a, "other", ""),
        (items[0], annotator_b, "other", "a statue"),
        (items[1], annotator_a, "other", "a statue"),
        (items[1], annotator_b, "other", ""),
        (items[1], annotator_b, "female", "a reason nobody asked for"),
    ]
    _, one_by_one = _run(study, rows, bulk=False)
    outcomes = services.labels_import_batch(
        study=study, rows=[services.LabelToImport(item, question, *rest) for item, *rest in rows]
    )
    assert [str(o) if isinstance(o, AnnotateError) else o for o in outcomes] == [
        "The answer “Other” needs a short reason.",
        "created",
        "created",
        "The answer “Other” needs a short reason.",
        "created",
    ]
    assert _snapshot(study) == one_by_one
    assert (items[1].key, "ben", "female", "") in one_by_one["labels"]


def test_the_same_box_answer_in_a_batch_is_checked_against_each_items_own_boxes(annotator_a, annotator_b):
    """A box answer depends on the item (one value per box): never taken as checked from another
    row of the batch."""
    objects = StudyFactory(name="Objects", slug="objects", protocol="objects")
    box = {"class": "tie", "confidence": 0.9, "box": [1.0, 2.0, 3.0, 4.0]}
    three, two = (
        ItemFactory(prompt=PromptFactory(study=objects), metadata={"gender": "male", "boxes": [box] * n})
        for n in (3, 2)
    )
    question = question_of(three, "boxes")  # shared by the rows, as labels_import passes it
    outcomes = services.labels_import_batch(
        study=objects,
        rows=[
            services.LabelToImport(three, question, annotator_a, "yes,no"),
            services.LabelToImport(two, question, annotator_a, "yes,no"),
            services.LabelToImport(three, question, annotator_b, "yes,no,yes"),
            services.LabelToImport(two, question, annotator_b, "yes,no,yes"),
        ],
    )
    shown = [str(o) if isinstance(o, AnnotateError) else o for o in outcomes]
    assert shown[1:3] == ["created", "created"]
    assert "has 2 value(s) for the 3 box(es)" in shown[0]
    assert "has 3 value(s) for the 2 box(es)" in shown[3]
    assert sorted(Label.objects.values_list("item_id", "value")) == sorted(
        [(two.pk, "yes,no"), (three.pk, "yes,no,yes")]
    )
