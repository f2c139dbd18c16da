"""The reliability page, its CSV and the API: figures per annotator, sortable, researchers only."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from annotate import services
from annotate.models import Assignment, GoldResponse, Label
from annotate.services.disputes import dispute_resolve
from metrics.agreement import cohen_kappa
from metrics.reliability import gold_accuracy, mean_kappa, pairwise_kappas, reliability_flagged
from quality.models import InferredReliability
from quality.selectors import reliability_report
from studies.models import GoldAnswer
from tests.factories import ItemFactory, PromptFactory
from tests.quality.seats import labelled


def test_pairwise_kappas_use_only_shared_units_and_equal_cohens():
    answers = {"a": {1: "x", 2: "y", 3: "x"}, "b": {1: "x", 2: "x", 3: "x", 4: "y"}, "c": {9: "y"}}
    kappas = pairwise_kappas(answers)
    assert set(kappas) == {("a", "b")}
    assert kappas[("a", "b")] == cohen_kappa(["x", "y", "x"], ["x", "x", "x"])
    assert mean_kappa(kappas, "c") is None


def test_gold_accuracy_flags_only_past_min_gold():
    assert gold_accuracy(1, 4, min_accuracy=0.8, min_gold=5).flagged is False
    assert gold_accuracy(3, 5, min_accuracy=0.8, min_gold=5).flagged is True
    assert gold_accuracy(0, 0, min_accuracy=0.8, min_gold=5).accuracy is None


def test_reliability_flags_only_an_accuracy_credibly_below_the_rule():
    # 0.5 over 60 answers: the Wilson interval's upper end is 0.62, below 0.8.
    assert reliability_flagged(0.5, 60, min_accuracy=0.8, min_n=5) is True
    # 0.7 over 20: the interval reaches 0.85, so nothing says they are below 0.8.
    assert reliability_flagged(0.7, 20, min_accuracy=0.8, min_n=5) is False
    assert reliability_flagged(0.0, 4, min_accuracy=0.8, min_n=5) is False  # too few answers
    assert reliability_flagged(0.5, 60, min_accuracy=None, min_n=5) is False  # no rule
    assert reliability_flagged(None, 60, min_accuracy=0.8, min_n=5) is False  # no figure


@pytest.fixture
def crowd(study, annotator_a, annotator_b, researcher):
    """Four items both A and B labelled (they agree on three), one gold item A got right and B wrong."""
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(5)]
    for annotator, values, durations in (
        (annotator_a, ["male", "male", "female", "female"], [1000, 2000, 3000, 4000]),
        (annotator_b, ["male", "male", "female", "male"], [500, 500, 500, 500]),
    ):
        for item, value, ms in zip(items[:4], values, durations, strict=True):
            Assignment.objects.create(
                item=item,
                annotator=annotator,
                slot=0 if annotator == annotator_a else 1,
                claimed_at="2026-01-01T00:00Z",
                expires_at="2026-01-01T01:00Z",
            )
            services.annotation_submit(
                item=item, annotator=annotator, answers={"gender": value}, duration_ms=ms
            )
    question = study.questions.get()
    GoldAnswer.objects.create(item=items[4], question=question, value="female")
    GoldResponse.objects.create(
        item=items[4], question=question, annotator=annotator_a, value="female", correct=True
    )
    GoldResponse.objects.create(
        item=items[4], question=question, annotator=annotator_b, value="male", correct=False
    )
    return items


def test_the_report_holds_each_annotators_figures(study, crowd):
    rows = {row.username: row for row in reliability_report(study=study).rows}
    anna, ben = rows["anna"], rows["ben"]
    assert (anna.labels, anna.median_seconds, ben.median_seconds) == (4, 2.5, 0.5)
    assert (anna.gold.correct, anna.gold.n, ben.gold.correct) == (1, 1, 0)
    expected = cohen_kappa(["male", "male", "female", "female"], ["male", "male", "female", "male"]).kappa
    assert anna.mean_kappa == pytest.approx(expected)
    assert ben.mean_kappa == pytest.approx(expected)
    assert anna.agreement_with_final == 1.0  # three agreed finals, item 4 is a dispute
    answers, counts = anna.confusion["gender"]
    assert counts[answers.index("male")][answers.index("male")] == 2


def test_the_page_sorts_and_exports_csv(study, crowd, researcher, client_for):
    client = client_for(researcher)
    url = reverse("quality:reliability", args=[study.slug])
    page = client.get(url, {"sort": "-median_seconds"})
    assert page.status_code == 200
    html = page.content.decode()
    assert html.index(">anna") < html.index(">ben")
    ascending = client.get(url, {"sort": "median_seconds"}).content.decode()
    assert ascending.index(">ben") < ascending.index(">anna")
    response = client.get(url, {"format": "csv", "sort": "median_seconds"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["annotator"] for row in rows] == ["ben", "anna"]
    assert rows[1]["gold_accuracy"] == "1.0"
    assert rows[0]["gold_correct"] == "0"


def test_the_api_lists_annotators_with_their_kappas(study, crowd, researcher, api_for):
    response = api_for(researcher).get("/api/annotators/", {"study": study.slug})
    assert response.status_code == 200
    by_name = {row["annotator"]: row for row in response.json()}
    assert by_name["anna"]["kappas"][0]["annotator"] == "ben"
    assert by_name["ben"]["gold_correct"] == 0
    assert api_for(researcher).get("/api/annotators/", {"study": "nope"}).status_code == 404


@pytest.mark.parametrize("method", ["get", "post"])
def test_annotators_cannot_reach_the_page_the_exclusion_or_the_api(
    study, crowd, annotator_a, client_for, api_for, method
):
    client = client_for(annotator_a)
    url = reverse("quality:reliability", args=[study.slug])
    assert getattr(client, method)(url).status_code in (403, 405)
    exclusion = reverse("quality:exclusion", args=[study.slug])
    assert getattr(client, method)(exclusion, {"username": "ben"}).status_code in (403, 405)
    assert getattr(api_for(annotator_a), method)("/api/annotators/", {"study": study.slug}).status_code in (
        403,
        405,
    )
    assert Label.objects.filter(annotator__username="ben").count() == 4


def test_the_exclude_button_excludes_and_reincludes(study, crowd, researcher, client_for):
    client = client_for(researcher)
    exclusion = reverse("quality:exclusion", args=[study.slug])
    client.post(exclusion, {"username": "ben", "action": "exclude"})
    assert not Label.objects.filter(annotator__username="ben").exists()
    rows = {row.username: row for row in reliability_report(study=study).rows}
    assert rows["ben"].excluded
    assert rows["ben"].gold.n == 1
    client.post(exclusion, {"username": "ben", "action": "include"})
    assert Label.objects.filter(annotator__username="ben").count() == 4


def test_an_annotator_far_from_the_finals_is_flagged_by_reliability_and_the_page_says_why(
    study, annotator_a, annotator_b, researcher, client_for
):
    study.min_gold_accuracy, study.min_gold = 0.8, 5
    study.save()
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(8)]
    labelled(items, annotator_a, "male", 0)
    labelled(items, annotator_b, "female", 1)
    question = study.questions.get()
    for item in items:  # a researcher settles every dispute for B's answer
        dispute_resolve(item=item, question=question, researcher=researcher, value="female")
    rows = {row.username: row for row in reliability_report(study=study).rows}
    assert rows["anna"].agreement_with_final == 0.0
    assert rows["anna"].flag_reasons == ("reliability",)
    assert rows["ben"].flag_reasons == ()
    client = client_for(researcher)
    html = client.get(reverse("quality:reliability", args=[study.slug])).content.decode()
    assert "flagged: reliability" in html
    assert "Agreement with the finals credibly below the rule" in html
    response = client.get(reverse("quality:reliability", args=[study.slug]), {"format": "csv"})
    table = {row["annotator"]: row for row in csv.DictReader(io.StringIO(response.content.decode()))}
    assert (table["anna"]["flagged"], table["anna"]["flag_reason"]) == ("True", "reliability")
    assert (table["ben"]["flagged"], table["ben"]["flag_reason"]) == ("False", "")
    # Without a rule nobody is flagged.
    study.min_gold_accuracy = None
    study.save()
    assert all(not row.flag_reasons for row in reliability_report(study=study).rows)


def test_the_models_reliability_is_what_the_flag_reads_when_a_model_ran(
    study, annotator_a, annotator_b, researcher, api_for
):
    study.min_gold_accuracy, study.min_gold = 0.8, 5
    study.save()
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(30)]
    labelled(items, annotator_a, "male", 0)
    labelled(items, annotator_b, "male", 1)
    # Both agree with every final (the agreement rule's), but the model found anna unreliable.
    InferredReliability.objects.create(
        study=study, annotator=annotator_a, method="dawid_skene", reliability=0.5
    )
    InferredReliability.objects.create(
        study=study, annotator=annotator_b, method="dawid_skene", reliability=0.95
    )
    rows = {row.username: row for row in reliability_report(study=study).rows}
    assert rows["anna"].agreement_with_final == 1.0
    assert rows["anna"].flag_reasons == ("reliability",)
    assert rows["ben"].flag_reasons == ()
    by_name = {
        row["annotator"]: row
        for row in api_for(researcher).get("/api/annotators/", {"study": study.slug}).json()
    }
    assert (by_name["anna"]["flagged"], by_name["anna"]["flag_reason"]) == (True, "reliability")


def test_gold_and_reliability_together_name_both_reasons(study, crowd):
    study.min_gold_accuracy, study.min_gold = 0.8, 1
    study.save()
    InferredReliability.objects.create(
        study=study, annotator=study.annotators.get(username="ben"), method="mace", reliability=0.1
    )
    rows = {row.username: row for row in reliability_report(study=study).rows}
    assert rows["ben"].flag_reasons == ("gold", "reliability")
    assert rows["anna"].flag_reasons == ()
