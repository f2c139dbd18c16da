"""The estimate from the rounds: exact at a census, pending rounds left out and named."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from estimates import estimands
from estimates import selectors as sel
from estimates.services import sampling_round_create
from metrics import gender as gm
from protocols.gender import estimates as gframe

pytestmark = pytest.mark.django_db


def _human_scores(fixture) -> dict[str, float | None]:
    counts: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for item in fixture.items:
        tally = counts[item.t2i_model][item.prompt_id]
        truth = fixture.truth[item.pk]
        if truth == "male":
            tally[0] += 1
        elif truth == "female":
            tally[1] += 1
    return {
        model: gm.model_bias_score({p: gm.prompt_bias_score(m, f) for p, (m, f) in prompts.items()}).value
        for model, prompts in counts.items()
    }


def test_a_budget_of_every_image_gives_exactly_the_human_score(sampled_study):
    sampling_round = sampling_round_create(study=sampled_study.study, detector="fake", budget=48, seed=0)
    assert sampling_round.n_selected == 48
    sampled_study.finish(sampling_round)
    estimate = gframe.bias_estimate(sampled_study.study, "fake", n_boot=50)
    human = _human_scores(sampled_study)
    for model in estimate.models:
        assert model.estimate is not None
        score = model.estimate.model_bias_score
        assert score.estimate == pytest.approx(human[model.t2i_model], abs=1e-12)
        assert model.estimate.n_labelled == 24
        low, high = score.ci95
        assert high - low == pytest.approx(0.0, abs=1e-9)
        # The detector alone errs (every fourth man called a woman): the census corrects it.
        assert model.detector_only != pytest.approx(human[model.t2i_model])


def test_labels_that_exist_are_taken_with_certainty_and_used(sampled_study):
    sampled_study.label(sampled_study.items[:24])  # every sdxl image labelled before any round
    sampling_round = sampling_round_create(study=sampled_study.study, detector="fake", budget=24, seed=0)
    sampled_study.finish(sampling_round)
    estimate = gframe.bias_estimate(sampled_study.study, "fake", n_boot=20)
    human = _human_scores(sampled_study)
    sdxl = next(m for m in estimate.models if m.t2i_model == "sdxl")
    assert sdxl.estimate is not None
    assert sdxl.estimate.model_bias_score.estimate == pytest.approx(human["sdxl"], abs=1e-12)


def test_a_round_with_unlabelled_images_is_pending_and_not_used(sampled_study):
    first = sampling_round_create(study=sampled_study.study, detector="fake", budget=12, seed=11)
    sampled_study.finish(first)
    second = sampling_round_create(
        study=sampled_study.study, detector="fake", budget=8, seed=12, design="active"
    )
    chosen = list(second.round_items.filter(selected=True).select_related("item"))
    assert len(chosen) >= 2, "seed 12 draws at least two items"
    sampled_study.label([chosen[0].item])  # one of its images labelled, the others wait
    estimate = gframe.bias_estimate(sampled_study.study, "fake", n_boot=20)
    assert [r.pk for r in estimate.rounds_used] == [first.pk]
    assert [s.round.pk for s in estimate.pending] == [second.pk]
    waiting = [c.item.key for c in chosen[1:]]  # in item order, as rows are
    pending = estimate.pending_json()
    assert pending == [
        {
            "round": 2,
            "pending_images": len(waiting),
            "waiting_for_labels": len(waiting),
            "waiting_for_dispute": 0,
            "images": waiting,
        }
    ]
    body = estimate.as_json()
    assert sum(b["pending"][0]["pending_images"] for b in body.values()) == len(waiting)
    assert all(b["rounds"] == 1 for b in body.values())
    assert all(any("wait for a final label" in w for w in b["warnings"]) for b in body.values())
    # Once labelled, the round counts.
    sampled_study.finish(second)
    after = gframe.bias_estimate(sampled_study.study, "fake", n_boot=20)
    assert [r.pk for r in after.rounds_used] == [first.pk, second.pk]
    assert after.pending == ()


def test_the_history_gives_one_width_per_round(sampled_study):
    first = sampling_round_create(study=sampled_study.study, detector="fake", budget=10, seed=1)
    sampled_study.finish(first)
    second = sampling_round_create(study=sampled_study.study, detector="fake", budget=10, seed=2)
    sampled_study.finish(second)
    estimate = gframe.bias_estimate(sampled_study.study, "fake", n_boot=30, history=True)
    for model in estimate.models:
        assert [p.rounds for p in model.history] == [1, 2]
        assert model.history[0].labels < model.history[1].labels
        assert all(p.width is not None and math.isfinite(p.width) for p in model.history)


def test_failed_and_filtered_verdicts_are_zero_vectors_and_other_labels_rest(sampled_study):
    frame = gframe.gender_frame(sampled_study.study, "fake", "1")
    data = gframe.arrays(frame.items, [])
    filtered = [k for k, item in enumerate(frame.items) if item.verdict == "filtered"]
    assert filtered
    assert (data.f[filtered] == 0).all()
    assert data.xi.shape == (0, 48)


def test_the_core_frame_reads_only_what_the_protocols_estimand_gives(sampled_study):
    study = sampled_study.study
    sampling_round = sampling_round_create(study=study, detector="fake", budget=10, seed=3)
    sampled_study.finish(sampling_round)
    bare = sel.sampling_frame(study, "fake", "1")
    assert {item.verdict for item in bare.items} == {sel.MISSING}
    assert all(item.human is None for item in bare.items)
    selected = sampling_round.round_items.filter(selected=True).values_list("item_id", flat=True)
    assert [state.pending for state in bare.rounds] == [tuple(sorted(selected))]
    gender = gframe.gender_frame(study, "fake", "1")
    assert estimands.frame_of(estimands.for_protocol("gender"), study, "fake", "1") == gender
    assert {item.verdict for item in gender.items} >= {"male", "female", "filtered"}
    labelled = {item.item_id for item in gender.items if item.human is not None}
    assert labelled
    assert labelled == set(gframe.labelled(study))
    assert not gender.pending
