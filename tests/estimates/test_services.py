"""sampling_round_create: π stored before the draw, the draw, its checks, the labelling queue."""

from __future__ import annotations

import math

import pytest
from django.db import IntegrityError, transaction

from annotate import services as annotate_services
from estimates import estimands
from estimates.models import RoundItem, SamplingRound
from estimates.services import SamplingError, sampling_round_create
from protocols.gender import estimates as gframe
from studies.models import Item, Question, Study
from tests.factories import FinalLabelFactory, StudyFactory
from tests.reports.dashboard_data import predict

pytestmark = pytest.mark.django_db


def _create(fixture, **kwargs):
    args = {"study": fixture.study, "detector": "fake", "budget": 10, "seed": 7} | kwargs
    return sampling_round_create(**args)


def test_a_round_stores_pi_for_every_item_summing_to_the_budget(sampled_study, researcher):
    sampling_round = _create(sampled_study, user=researcher)
    rows = list(sampling_round.round_items.all())
    assert len(rows) == len(sampled_study.items) == 48
    assert math.isclose(sum(r.pi for r in rows), 10.0, rel_tol=1e-9)
    assert all(math.isclose(r.pi, 10 / 48) for r in rows)
    assert sampling_round.n_selected == sum(r.selected for r in rows)
    assert (sampling_round.number, sampling_round.detector_version, sampling_round.design) == (
        1,
        "1",
        "uniform",
    )
    assert sampling_round.created_by == researcher


def test_the_same_seed_draws_the_same_items(sampled_study):
    first = _create(sampled_study, seed=123)
    chosen = set(first.round_items.filter(selected=True).values_list("item_id", flat=True))
    # Undo the round's rows only to draw again on the same frame: the service itself never deletes.
    with transaction.atomic():
        RoundItem.objects.filter(round=first).delete()
        first.delete()
    again = _create(sampled_study, seed=123)
    assert set(again.round_items.filter(selected=True).values_list("item_id", flat=True)) == chosen


def test_a_round_without_a_seed_gets_one_stored(sampled_study):
    sampling_round = _create(sampled_study, seed=None)
    assert 0 <= sampling_round.seed < 2**31


def test_selected_items_are_queued_first_and_served_before_others(sampled_study, annotator_a):
    sampling_round = _create(sampled_study, budget=5, seed=3)
    selected = list(
        sampling_round.round_items.filter(selected=True).order_by("item_id").values_list("item_id", flat=True)
    )
    assert selected, "seed 3 draws at least one item"
    assert set(Item.objects.filter(queue=2).values_list("pk", flat=True)) == set(selected)
    study = Study.objects.get(pk=sampled_study.study.pk)
    assert study.priority_queue
    seats = annotate_services.assignment_queue(study=study, annotator=annotator_a, size=len(selected) + 1)
    assert [seat.item_id for seat in seats[: len(selected)]] == selected
    assert seats[-1].item_id not in selected  # then the ordinary queue


def test_round_rows_are_immutable_through_the_database_constraints(sampled_study):
    sampling_round = _create(sampled_study)
    row = sampling_round.round_items.first()
    with pytest.raises(IntegrityError), transaction.atomic():
        RoundItem.objects.create(round=sampling_round, item_id=row.item_id, pi=0.5, selected=False)
    with pytest.raises(IntegrityError), transaction.atomic():
        RoundItem.objects.filter(pk=row.pk).update(pi=1.5)


def test_the_admin_can_neither_add_change_nor_delete_rounds(sampled_study, admin_user, client_for):
    sampling_round = _create(sampled_study)
    client = client_for(admin_user)
    assert client.get(f"/admin/estimates/samplinground/{sampling_round.pk}/change/").status_code == 200
    assert client.get("/admin/estimates/samplinground/add/").status_code == 403
    response = client.post(f"/admin/estimates/samplinground/{sampling_round.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    row = sampling_round.round_items.first()
    before = row.pi
    client.post(f"/admin/estimates/rounditem/{row.pk}/change/", {"pi": "0.9", "selected": "on"})
    row.refresh_from_db()
    assert row.pi == before


@pytest.mark.parametrize("budget", [0, -3])
def test_a_budget_of_zero_or_less_is_refused_naming_budget(sampled_study, budget):
    with pytest.raises(SamplingError, match=r"^budget:") as error:
        _create(sampled_study, budget=budget)
    assert error.value.field == "budget"
    assert not SamplingRound.objects.exists()


def test_a_budget_larger_than_the_unlabelled_pool_is_refused(sampled_study):
    sampled_study.label(sampled_study.items[:40])
    with pytest.raises(SamplingError, match=r"budget: 9 is more than the 8 image"):
        _create(sampled_study, budget=9)
    assert not SamplingRound.objects.exists()
    assert not Item.objects.filter(queue=2).exists()


def test_a_detector_without_predictions_is_refused_naming_the_known_ones(sampled_study):
    with pytest.raises(SamplingError, match=r"detector: 'clip' has no gender predictions.*fake"):
        _create(sampled_study, detector="clip")


def test_a_study_of_another_protocol_is_refused(db, monkeypatch):
    # Every protocol has its estimate: unregister one to see the refusal.
    monkeypatch.delitem(estimands.ESTIMANDS, "objects")
    other = StudyFactory(protocol="objects")
    with pytest.raises(
        SamplingError,
        match=r"^study: .*few-label estimates exist for attributes, gender, pair_change, questions studies",
    ):
        sampling_round_create(study=other, detector="fake", budget=3)


def test_an_unknown_design_is_refused(sampled_study):
    # "stratified" is a design of every protocol now.
    with pytest.raises(SamplingError, match=r"^design: must be one of uniform, active, stratified"):
        _create(sampled_study, design="systematic")


def test_active_needs_an_earlier_round(sampled_study):
    with pytest.raises(SamplingError, match=r"^design: active needs"):
        _create(sampled_study, design="active")


def test_no_new_round_while_the_last_one_waits_for_labels(sampled_study):
    _create(sampled_study, seed=1)
    with pytest.raises(SamplingError, match=r"round 1 .* without a final label"):
        _create(sampled_study, seed=2)
    assert SamplingRound.objects.count() == 1


def test_a_second_round_gives_pi_zero_to_the_first_draw_and_one_to_labels_made_since(sampled_study):
    first = _create(sampled_study, budget=8, seed=5)
    sampled_study.finish(first)
    drawn = set(first.round_items.filter(selected=True).values_list("item_id", flat=True))
    outside = next(i for i in sampled_study.items if i.pk not in drawn)
    sampled_study.label([outside])  # labelled in the ordinary queue meanwhile
    second = _create(sampled_study, budget=6, seed=6, design="active")
    pis = dict(second.round_items.values_list("item_id", "pi"))
    assert all(pis[i] == 0 for i in drawn)
    assert pis[outside.pk] == 1.0
    pool = [i.pk for i in sampled_study.items if i.pk not in drawn and i.pk != outside.pk]
    assert math.isclose(sum(pis[i] for i in pool), 6.0, rel_tol=1e-6)
    assert min(pis[i] for i in pool) > 0  # the floor
    assert len({round(pis[i], 9) for i in pool}) > 1  # active: not uniform
    assert second.number == 2


def test_a_new_detector_version_starts_a_new_series_of_rounds(sampled_study):
    first = _create(sampled_study, budget=6, seed=5)
    sampled_study.finish(first)
    for item in sampled_study.items:
        predict(item, "fake", "2", "male")
    second = _create(sampled_study, budget=6, seed=9, design="uniform")
    assert (second.number, second.detector_version) == (2, "2")
    frame = gframe.gender_frame(sampled_study.study, "fake", "2")
    assert [state.round.pk for state in frame.rounds] == [second.pk]
    # The first round's labels are known: in the new series they are taken with certainty.
    labelled = set(first.round_items.filter(selected=True).values_list("item_id", flat=True))
    pis = dict(second.round_items.values_list("item_id", "pi"))
    assert all(pis[i] == 1.0 for i in labelled)


def test_an_item_in_a_round_cannot_be_deleted_alone_but_the_study_can(sampled_study):
    from django.db.models import RestrictedError

    _create(sampled_study)
    item = sampled_study.items[0]
    with pytest.raises(RestrictedError), transaction.atomic():
        item.delete()
    assert Item.objects.filter(pk=item.pk).exists()
    Study.objects.filter(pk=sampled_study.study.pk).delete()
    assert not SamplingRound.objects.exists()
    assert not RoundItem.objects.exists()


def test_the_estimate_says_when_rounds_belong_to_another_version(sampled_study):
    first = _create(sampled_study, budget=6, seed=5)
    sampled_study.finish(first)
    for item in sampled_study.items:
        predict(item, "fake", "2", "male")
    estimate = gframe.bias_estimate(sampled_study.study, "fake", n_boot=0)
    assert estimate.version == "2"
    assert estimate.rounds_used == ()
    assert any("Round(s) 1 (1) were drawn for another version" in w for w in estimate.models[0].warnings)


def test_a_first_stratified_round_is_proportional_and_logs_pi_per_item(sampled_study):
    sampling_round = _create(sampled_study, budget=12, design="stratified")
    pis = list(RoundItem.objects.filter(round=sampling_round).values_list("pi", flat=True))
    assert len(pis) == 48
    # No label yet: proportional allocation, every item budget / n.
    assert pis == pytest.approx([12 / 48] * 48)
    assert sampling_round.design == "stratified"


def test_a_stratified_round_gives_more_labels_where_the_detector_erred(sampled_study):
    first = _create(sampled_study, budget=16, seed=2)
    sampled_study.finish(first)
    second = _create(sampled_study, budget=12, design="stratified", seed=3)
    rows = RoundItem.objects.filter(round=second, pi__gt=0).select_related("item")
    verdicts = {
        item.item_id: item.verdict for item in gframe.gender_frame(sampled_study.study, "fake", "1").items
    }
    by_verdict: dict[str, list[float]] = {}
    for row in rows:
        if row.pi < 1:
            by_verdict.setdefault(verdicts[row.item_id], []).append(row.pi)
    # The fixture's detector calls every fourth man a woman: "female" verdicts err, "male" never.
    assert min(by_verdict["female"]) > max(by_verdict["male"])
    assert min(by_verdict["male"]) > 0
    pool = [row.pi for row in rows if row.pi < 1]
    assert sum(pool) == pytest.approx(12)


def test_an_attributes_study_draws_a_stratified_round(db):
    # stratified and active for every protocol (from its detector output codes).
    from tests.reports.attributes_data import attributes_study, gep_item

    study = attributes_study()
    gep_item(study, "sdxl", "woman", "neutral", scores={"clip": {"boots": 0.5, "dress": 0.5, "tie": 0.5}})
    gep_item(study, "sdxl", "man", "neutral", scores={"clip": {"boots": 0.1, "dress": 0.1, "tie": 0.9}})
    drawn = sampling_round_create(study=study, detector="clip", budget=1, design="stratified", seed=1)
    assert drawn.design == "stratified"
    assert sum(drawn.round_items.values_list("pi", flat=True)) == pytest.approx(1)


def test_an_active_round_gives_more_labels_where_the_detector_erred(db):
    # The detector says yes to every attribute of 20 images (code 3), wrongly on every other
    # one, and no to every attribute of 20 others (code 0), always rightly.
    from protocols.attributes.estimates import attribute_output_codes
    from tests.reports.attributes_data import attributes_study, gep_item

    study = attributes_study()
    truth: dict[int, str] = {}
    for i in range(40):
        says_yes = i < 20
        value = 0.9 if says_yes else 0.1
        item = gep_item(
            study, "sdxl", "woman" if i % 2 else "man", "neutral", context=f"c{i}",
            scores={"clip": {"boots": value, "dress": value, "tie": value}},
        )  # fmt: skip
        truth[item.pk] = "yes" if says_yes and i % 4 < 2 else "no"
    with pytest.raises(SamplingError, match=r"^design: active needs"):
        sampling_round_create(study=study, detector="clip", budget=4, design="active")
    first = sampling_round_create(study=study, detector="clip", budget=16, seed=4)
    questions = list(Question.objects.filter(study=study))
    for item in Item.objects.filter(pk__in=first.round_items.filter(selected=True).values("item_id")):
        for question in questions:
            FinalLabelFactory(item=item, question=question, value=truth[item.pk])
    second = sampling_round_create(study=study, detector="clip", budget=6, design="active", seed=5)
    pis = dict(second.round_items.values_list("item_id", "pi"))
    pool = {i: p for i, p in pis.items() if 0 < p < 1}
    codes = attribute_output_codes(study, "clip", second.detector_version)
    erring = [p for i, p in pool.items() if codes[i] == 3]
    right = [p for i, p in pool.items() if codes[i] == 0]
    assert erring
    assert right
    assert min(erring) > max(right) > 0
    assert sum(pool.values()) == pytest.approx(6)


def test_the_gender_estimate_reads_a_finished_stratified_round(sampled_study):
    first = _create(sampled_study, budget=16, seed=2)
    sampled_study.finish(first)
    second = _create(sampled_study, budget=12, design="stratified", seed=3)
    sampled_study.finish(second)
    estimate = gframe.bias_estimate(sampled_study.study, "fake", n_boot=50)
    assert [r.number for r in estimate.rounds_used] == [1, 2]
    for model in estimate.models:
        assert model.estimate is not None
        assert model.estimate.rounds == 2
        assert model.estimate.model_bias_score.ci95 is not None
