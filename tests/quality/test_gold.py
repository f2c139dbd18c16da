"""Gold items: import, serving among ordinary items, gold accuracy and the study's rule."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotate import services
from annotate.errors import NotDisputed
from annotate.models import Assignment, FinalLabel, FinalLabelSource, GoldResponse, Label
from annotate.services.disputes import dispute_resolve, dispute_resolve_unresolvable
from quality.selectors import gold_scores, reliability_report
from quality.services import gold_import
from studies.errors import ImportRejected
from studies.models import GoldAnswer, Item
from tests.factories import ItemFactory, PromptFactory
from tests.quality.seats import labelled


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study)
    return [ItemFactory(prompt=prompt) for _ in range(12)]


def _gold_csv(tmp_path, rows, header="image,question,answer"):
    path = tmp_path / "gold.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def _make_gold(study, tmp_path, golds):
    return gold_import(
        study=study, csv_path=_gold_csv(tmp_path, [f"{item.key},gender,{value}" for item, value in golds])
    )


def test_import_gold_makes_items_gold_and_takes_them_out_of_the_queue(study, items, tmp_path):
    result = _make_gold(study, tmp_path, [(items[0], "male"), (items[1], "female")])
    assert (result.items, result.answers) == (2, 2)
    assert dict(GoldAnswer.objects.values_list("item_id", "value")) == {
        items[0].pk: "male",
        items[1].pk: "female",
    }
    assert list(Item.objects.filter(queue=0).order_by("pk").values_list("pk", flat=True)) == [
        items[0].pk,
        items[1].pk,
    ]
    # Again with the same file: nothing new.
    assert _make_gold(study, tmp_path, [(items[0], "male"), (items[1], "female")]).answers == 0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("nope.png,gender,male", "row 3: unknown image 'nope.png'"),
        ("{key},colour,male", "row 3: unknown question 'colour'"),
        ("{key},gender,giraffe", "row 3: “giraffe” is not a label"),
    ],
)
def test_a_bad_gold_row_is_one_line_and_nothing_is_written(study, items, tmp_path, row, message):
    path = _gold_csv(tmp_path, [f"{items[0].key},gender,male", row.format(key=items[1].key)])
    with pytest.raises(CommandError) as caught:
        call_command("import_gold", str(path), "--study", study.slug, stdout=StringIO())
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not GoldAnswer.objects.exists()
    assert not Item.objects.filter(queue=0).exists()


def test_an_item_still_being_labelled_cannot_become_gold(study, items, tmp_path, annotator_a):
    seat = services.assignment_queue(study=study, annotator=annotator_a, size=1)[0]
    services.annotation_submit(item=seat.item, annotator=annotator_a, answers={"gender": "male"})
    with pytest.raises(ImportRejected, match=r"is still being labelled \(1 of 2 seats\)"):
        _make_gold(study, tmp_path, [(seat.item, "male")])


def test_an_agreed_item_becomes_gold_from_its_page(
    study, items, annotator_a, annotator_b, annotator_c, researcher, client_for
):
    agreed, disputed = items[0], items[1]
    for annotator, values in ((annotator_a, ("male", "male")), (annotator_b, ("male", "female"))):
        for item, value in zip((agreed, disputed), values, strict=True):
            Assignment.objects.create(
                item=item,
                annotator=annotator,
                slot=0 if annotator == annotator_a else 1,
                claimed_at="2026-01-01T00:00Z",
                expires_at="2026-01-01T01:00Z",
            )
            services.annotation_submit(item=item, annotator=annotator, answers={"gender": value})
    client = client_for(researcher)
    page = client.post(reverse("quality:gold_mark", args=[agreed.pk]), follow=True)
    assert "is now a gold item" in page.content.decode()
    assert GoldAnswer.objects.get(item=agreed).value == "male"
    assert Item.objects.get(pk=agreed.pk).queue == 0
    page = client.post(reverse("quality:gold_mark", args=[disputed.pk]), follow=True)
    assert "has no agreed or resolved final answer" in page.content.decode()
    assert not GoldAnswer.objects.filter(item=disputed).exists()
    assert client_for(annotator_a).post(reverse("quality:gold_mark", args=[disputed.pk])).status_code == 403
    # A newcomer is served it as a gold item; its labels and final answer stay as they were.
    study.gold_rate = 0.5
    study.save()
    study.annotators.add(annotator_c)
    shown = _label_everything(study, annotator_c, lambda item: "female")
    assert agreed.pk in {item.pk for item in shown}
    assert GoldResponse.objects.get(annotator=annotator_c).correct is False
    assert FinalLabel.objects.get(item=agreed).value == "male"


def test_an_item_whose_dispute_a_researcher_resolved_becomes_gold_with_the_resolution(
    study, items, annotator_a, annotator_b, annotator_c, researcher, client_for
):
    disputed, imported = items[0], items[1]
    _disputed(disputed, [(annotator_a, "male"), (annotator_b, "female")])
    question = study.questions.get()
    client = client_for(researcher)
    screen = reverse("annotate:dispute_question", args=[disputed.pk, question.key])
    gold_button = reverse("quality:gold_mark", args=[disputed.pk])
    assert gold_button not in client.get(screen).content.decode()  # disputed: not settled yet
    dispute_resolve(item=disputed, question=question, researcher=researcher, value="female")
    assert gold_button in client.get(screen).content.decode()  # resolved: the dispute screen offers it
    page = client.post(reverse("quality:gold_mark", args=[disputed.pk]), follow=True)
    assert "is now a gold item" in page.content.decode()
    assert GoldAnswer.objects.get(item=disputed).value == "female"
    final = FinalLabel.objects.get(item=disputed)
    assert (final.value, final.source) == ("female", FinalLabelSource.RESOLVED)
    # An imported final answer is not this study's to turn into gold.
    FinalLabel.objects.create(
        item=imported,
        question=question,
        value="male",
        source=FinalLabelSource.IMPORTED,
        decided_at=timezone.now(),
    )
    page = client.post(reverse("quality:gold_mark", args=[imported.pk]), follow=True)
    assert "has an imported final answer" in page.content.decode()
    assert not GoldAnswer.objects.filter(item=imported).exists()
    # A newcomer is served the resolved item as a gold item, scored against the resolution.
    study.gold_rate = 0.5
    study.save()
    study.annotators.add(annotator_c)
    shown = _label_everything(study, annotator_c, lambda item: "female")
    assert disputed.pk in {item.pk for item in shown}
    assert GoldResponse.objects.get(annotator=annotator_c, item=disputed).correct is True
    assert not Label.objects.filter(item=disputed, annotator=annotator_c).exists()
    assert FinalLabel.objects.get(item=disputed).source == FinalLabelSource.RESOLVED


def _disputed(item, answers):
    for slot, (annotator, value) in enumerate(answers):
        labelled([item], annotator, value, slot)


def test_a_gold_items_answer_cannot_be_resolved_again_and_an_unresolvable_one_is_no_gold(
    study, items, annotator_a, annotator_b, researcher, client_for
):
    gold, unresolvable = items[0], items[1]
    question = study.questions.get()
    for item in (gold, unresolvable):
        _disputed(item, [(annotator_a, "male"), (annotator_b, "female")])
    dispute_resolve(item=gold, question=question, researcher=researcher, value="female")
    client = client_for(researcher)
    client.post(reverse("quality:gold_mark", args=[gold.pk]))
    assert GoldAnswer.objects.get(item=gold).value == "female"
    with pytest.raises(NotDisputed, match="is a gold item"):
        dispute_resolve(item=gold, question=question, researcher=researcher, value="male")
    assert FinalLabel.objects.get(item=gold).value == "female"

    dispute_resolve_unresolvable(item=unresolvable, question=question, researcher=researcher)
    page = client.post(reverse("quality:gold_mark", args=[unresolvable.pk]), follow=True)
    assert "settled as unresolvable on gender" in page.content.decode()
    assert not GoldAnswer.objects.filter(item=unresolvable).exists()
    assert Item.objects.get(pk=unresolvable.pk).queue != 0


def test_an_open_reservation_does_not_come_back_when_its_item_becomes_gold(
    study, items, annotator_a, researcher, client_for
):
    item = items[0]
    held = services.assignment_queue(study=study, annotator=annotator_a, size=1)[0]
    assert held.item_id == item.pk
    services.final_label_set(
        item=item,
        question=study.questions.get(),
        value="male",
        decided_by=researcher,
        source=FinalLabelSource.RESOLVED,
    )
    client_for(researcher).post(reverse("quality:gold_mark", args=[item.pk]))
    assert GoldAnswer.objects.filter(item=item).exists()
    assert not Assignment.objects.filter(item=item, completed_at__isnull=True).exists()
    assert item.pk not in {
        seat.item_id for seat in services.assignment_queue(study=study, annotator=annotator_a)
    }


def _label_everything(study, annotator, answer_for):
    """Label the annotator's queue the way the screen does until it is empty: each item's
    answer from ``answer_for(item)``. The items shown, in order."""
    shown = []
    queue = services.assignment_queue(study=study, annotator=annotator, size=2, gold=True)
    while queue:
        item = queue[0].item
        shown.append(item)
        queue = services.annotation_submit_next(
            study=study, annotator=annotator, item_id=item.pk, answers={"gender": answer_for(item)}
        ).queue
        assert len(shown) < 100
    return shown


def test_gold_items_are_served_among_ordinary_ones_and_never_become_labels(
    study, items, tmp_path, annotator_a
):
    gold = items[:3]
    _make_gold(study, tmp_path, [(item, "female") for item in gold])
    study.gold_rate = 0.3
    study.save()
    shown = _label_everything(study, annotator_a, lambda item: "male")
    gold_shown = [item for item in shown if item.pk in {g.pk for g in gold}]
    assert len(shown) == len(set(item.pk for item in shown))  # never the same item twice
    assert len(shown) - len(gold_shown) == 9  # every ordinary item
    assert 2 <= len(gold_shown) <= 3
    assert shown[0].pk not in {g.pk for g in gold}  # not the very first item
    # The answers on gold items are gold responses, never labels or final labels.
    assert GoldResponse.objects.filter(annotator=annotator_a).count() == len(gold_shown)
    assert not GoldResponse.objects.filter(correct=True).exists()
    assert not Label.objects.filter(item__in=gold).exists()
    assert not FinalLabel.objects.filter(item__in=gold).exists()
    # Their seats sit above the item's N seats and leave its completed-seat count alone.
    assert all(
        slot >= study.labels_per_item
        for slot in Assignment.objects.filter(item__in=gold).values_list("slot", flat=True)
    )
    assert set(
        Item.objects.filter(pk__in=[g.pk for g in gold]).values_list("completed_seats", flat=True)
    ) == {0}


GOLD_STATEMENTS = (
    '"studies_goldanswer"',  # the gold items, with the annotator's seats on them
    'SELECT COUNT("annotate_assignment"',  # the annotator's seat counts
    'SELECT "studies_item"."id" AS "pk" FROM "studies_item"',  # a handed-out gold item's lock
    'SELECT MAX("annotate_assignment"."slot")',  # and its slot
)


def test_a_gold_studys_key_press_adds_two_reads_and_two_more_when_it_hands_out_gold(
    study, items, tmp_path, annotator_a
):
    _make_gold(study, tmp_path, [(item, "female") for item in items[:3]])
    study.gold_rate = 0.3
    study.save()
    queue = services.assignment_queue(study=study, annotator=annotator_a, size=2, gold=True)
    extra = []
    while queue:
        with CaptureQueriesContext(connection) as caught:
            queue = services.annotation_submit_next(
                study=study, annotator=annotator_a, item_id=queue[0].item.pk, answers={"gender": "male"}
            ).queue
        sql = [query["sql"] for query in caught.captured_queries]
        extra.append(sum(1 for statement in sql if any(part in statement for part in GOLD_STATEMENTS)))
    # Every submit: at most the two reads (one once an open gold seat ends the look early), a
    # gold item's lock and slot when it hands one out, and on a gold item its gold answers;
    # whatever the seats already held.
    assert max(extra) <= 5
    assert any(n >= 4 for n in extra)  # a gold seat was handed out
    assert len(extra) >= 10


def _screen_shape(html: str) -> str:
    """The labeling screen with what differs from item to item blanked: ids, keys, hashes,
    image paths, the request id, the CSRF token."""
    html = re.sub(r"/media/[^\"' )]+", "IMAGE", html)
    html = re.sub(r"[A-Za-z0-9]{32,}", "TOKEN", html)
    return re.sub(r"[0-9a-f]{8,}|\d+", "N", html)


def test_a_gold_item_looks_exactly_like_an_ordinary_one_on_the_screen(
    study, items, tmp_path, annotator_a, client_for
):
    gold_ids = {item.pk for item in items[:3]}
    _make_gold(study, tmp_path, [(item, "female") for item in items[:3]])
    study.gold_rate = 1.0
    study.save()
    client = client_for(annotator_a)
    screens = {}
    html = client.get(reverse("annotate:label_study", args=[study.slug])).content.decode()
    for _ in range(6):
        item_id = int(re.search(r'id="current-image"[^>]*data-item-id="(\d+)"', html).group(1))
        screens[item_id in gold_ids] = html
        if len(screens) == 2:
            break
        request_id = re.search(r'name="request_id" value="([0-9a-f]+)"', html).group(1)
        html = client.post(
            reverse("annotate:label_submit", args=[study.slug, item_id]),
            {"answer_gender": "male", "request_id": request_id},
        )
        html = client.get(reverse("annotate:label_study", args=[study.slug])).content.decode()
    assert set(screens) == {True, False}
    assert "gold" not in screens[True].lower()
    assert _screen_shape(screens[True]) == _screen_shape(screens[False])


def test_a_study_without_gold_rate_serves_no_gold(study, items, tmp_path, annotator_a):
    _make_gold(study, tmp_path, [(items[0], "female")])
    shown = _label_everything(study, annotator_a, lambda item: "male")
    assert items[0].pk not in {item.pk for item in shown}
    assert len(shown) == 11


def _set_gold_rule(study) -> None:
    """``create_study`` again on ``study``, asking 0.8 of at least 5 gold answers right."""
    call_command(
        "create_study",
        *(study.slug, "--protocol", "gender", "--min-gold-accuracy", "0.8", "--min-gold", "5"),
        stdout=StringIO(),
    )


def test_gold_accuracy_and_the_rule_flag_the_careless(study, items, tmp_path, annotator_a, annotator_b):
    gold = items[:6]
    _make_gold(study, tmp_path, [(item, "female") for item in gold])
    for annotator, right in ((annotator_a, 6), (annotator_b, 2)):
        for index, item in enumerate(gold):
            GoldResponse.objects.create(
                item=item,
                question=study.questions.get(),
                annotator=annotator,
                value="female" if index < right else "male",
                correct=index < right,
            )
    _set_gold_rule(study)
    study.refresh_from_db()
    scores = gold_scores(study=study)
    assert (scores["anna"].n, scores["anna"].correct, scores["anna"].flagged) == (6, 6, False)
    b = scores["ben"]
    assert (b.correct, b.flagged) == (2, True)
    assert b.low < 2 / 6 < b.high
    assert [row.username for row in reliability_report(study=study).rows if row.flag_reasons] == ["ben"]


def test_a_rule_needing_more_gold_than_there_is_is_refused(study, items, tmp_path):
    _make_gold(study, tmp_path, [(items[0], "female"), (items[1], "male")])
    with pytest.raises(CommandError) as caught:
        _set_gold_rule(study)
    assert "--min-gold 5 is more than the study's 2 gold item(s)" in str(caught.value)
    study.refresh_from_db()
    assert study.min_gold_accuracy is None
    assert study.min_gold == 5


def test_gold_rate_changes_on_a_study_with_labels(study, items, annotator_a):
    seat = services.assignment_queue(study=study, annotator=annotator_a, size=1)[0]
    services.annotation_submit(item=seat.item, annotator=annotator_a, answers={"gender": "male"})
    call_command("create_study", study.slug, "--protocol", "gender", "--gold-rate", "0.1", stdout=StringIO())
    study.refresh_from_db()
    assert study.gold_rate == 0.1
    with pytest.raises(CommandError, match="between 0 and 1"):
        call_command(
            "create_study", study.slug, "--protocol", "gender", "--gold-rate", "1.5", stdout=StringIO()
        )


def test_the_api_serves_no_gold_and_takes_no_answer_to_one(
    study, items, tmp_path, annotator_a, annotator_b, api_for
):
    gold_ids = {item.pk for item in items[:3]}
    _make_gold(study, tmp_path, [(item, "female") for item in items[:3]])
    study.gold_rate = 1.0
    study.save()
    assert not gold_ids & {
        seat.item.pk for seat in services.assignment_queue(study=study, annotator=annotator_b, size=5)
    }
    queue = services.assignment_queue(study=study, annotator=annotator_a, size=2, gold=True)
    gold_seat = next(seat for seat in queue if seat.item.pk in gold_ids)
    response = api_for(annotator_a).post(
        "/api/labels/", {"item": gold_seat.item.pk, "value": "female"}, format="json"
    )
    assert response.status_code == 404
    assert not GoldResponse.objects.exists()
    assert not Label.objects.exists()
