"""recompute_finals: a truth-inference rule sets final answers with their posterior, below the
threshold a dispute; the reliability page and the export carry its figures."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from annotate import selectors
from annotate.exports import ground_truth_rows
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, Label
from quality.selectors import reliability_report
from tests.factories import ItemFactory, PromptFactory, UserFactory


@pytest.fixture
def labelled(study):
    """Three annotators on eight items: a and b always right, c always wrong; the last item
    has only two labels (not finished)."""
    study.labels_per_item = 3
    study.agreement = "majority"
    study.save()
    question = study.questions.get()
    users = [UserFactory(username=name) for name in ("ann", "bob", "cyd")]
    study.annotators.add(*users)
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(8)]
    for index, item in enumerate(items):
        truth = "male" if index % 2 else "female"
        wrong = "female" if truth == "male" else "male"
        for slot, (user, value) in enumerate(zip(users, (truth, truth, wrong), strict=True)):
            if index == 7 and slot == 2:
                continue
            Assignment.objects.create(
                item=item,
                annotator=user,
                slot=slot,
                claimed_at="2026-01-01T00:00Z",
                expires_at="2026-01-01T01:00Z",
                completed_at="2026-01-01T00:01Z",
            )
            Label.objects.create(item=item, question=question, annotator=user, value=value)
        item.completed_seats = 2 if index == 7 else 3
        item.save(update_fields=["completed_seats"])
    return items


def test_dawid_skene_sets_finals_with_their_posterior(study, labelled):
    out = StringIO()
    call_command("recompute_finals", "--study", study.slug, "--aggregation", "dawid_skene", stdout=out)
    assert "(dawid_skene): 7 final answer(s) changed; 7 agreed, 0 disputed" in out.getvalue()
    finals = {f.item_id: f for f in FinalLabel.objects.all()}
    assert finals[labelled[0].pk].value == "female"
    assert finals[labelled[1].pk].value == "male"
    assert labelled[7].pk not in finals  # two labels of three: not finished
    assert all(f.posterior > 0.9 for f in finals.values())
    assert "Dawid-Skene: posterior" in finals[labelled[0].pk].note
    rows = {row.username: row for row in reliability_report(study=study).rows}
    assert rows["cyd"].reliability < 0.5 < rows["ann"].reliability
    export = {row["item"]: row for row in ground_truth_rows(study=study)}
    assert export[labelled[0].key]["posterior"] == finals[labelled[0].pk].posterior
    assert export[labelled[7].key]["posterior"] is None


def test_below_the_posterior_threshold_is_a_dispute_and_majority_comes_back(study, labelled):
    call_command(
        "recompute_finals",
        "--study",
        study.slug,
        "--aggregation",
        "glad",
        "--min-posterior",
        "1.0",
        stdout=StringIO(),
    )
    assert not FinalLabel.objects.exists()
    assert len(selectors.dispute_pairs(study=study)) == 7
    assert FinalLabelRevision.objects.count() == 0
    call_command("recompute_finals", "--study", study.slug, "--aggregation", "majority", stdout=StringIO())
    assert FinalLabel.objects.count() == 7
    assert set(FinalLabel.objects.values_list("posterior", flat=True)) == {None}


def test_the_key_press_leaves_a_models_finals_alone(study, labelled):
    call_command("recompute_finals", "--study", study.slug, "--aggregation", "dawid_skene", stdout=StringIO())
    before = list(FinalLabel.objects.order_by("pk").values_list("item_id", "value", "posterior"))
    from annotate import services

    item = labelled[7]
    user = UserFactory(username="dee")
    study.annotators.add(user)
    Assignment.objects.create(
        item=item, annotator=user, slot=2, claimed_at="2026-01-01T00:00Z", expires_at="2099-01-01T00:00Z"
    )
    services.annotation_submit(item=item, annotator=user, answers={"gender": "male"})
    assert list(FinalLabel.objects.order_by("pk").values_list("item_id", "value", "posterior")) == before


def test_bad_rules_are_refused(study, labelled):
    with pytest.raises(CommandError, match="--min-posterior must be above 0"):
        call_command("recompute_finals", "--study", study.slug, "--min-posterior", "0", stdout=StringIO())
    with pytest.raises(CommandError, match="already has labels: its agreement cannot change"):
        call_command(
            "create_study", study.slug, "--protocol", "gender", "--aggregation", "glad", stdout=StringIO()
        )
