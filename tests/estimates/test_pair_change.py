"""The pair_change protocol's few-label estimate: the share of pairs whose age,
gender or skin changed as people judge it, per T2I model and domain, from the measurements."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from estimates.models import SamplingRound
from studies.models import Item
from tests.factories import FinalLabelFactory, question_of
from tests.reports.pair_change_data import AGE_GENDER, build, pair_key

pytestmark = pytest.mark.django_db

# What people answer per pair (age, gender, skin); sd15 profession changed shares: age 2/4
# (nurse/S1 older, pilot/S1 younger), gender 2/4, skin 1/4.
ANSWERS = {
    ("sd15", "nurse", "S1"): ("older", "male_female", "lighter"),
    ("sd15", "nurse", "S2"): ("same", "female_female", "same"),
    ("sd15", "pilot", "S1"): ("younger", "male_male", "same"),
    ("sd15", "pilot", "S2"): ("same", "female_male", "same"),
    ("sd15", "brave", "S1"): ("same", "male_male", "same"),
    ("sd15", "brave", "S2"): ("same", "female_female", "darker"),
    ("p2p", "nurse", "S1"): ("same", "male_male", "same"),
}


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _label(fixture, item_ids=None) -> None:
    for (model, word, seed), values in ANSWERS.items():
        item = fixture.pairs[pair_key(model, word, seed)]
        if item_ids is not None and item.pk not in item_ids:
            continue
        for key, value in zip(("age", "gender", "skin"), values, strict=True):
            FinalLabelFactory(item=item, question=question_of(item, key), value=value)


def test_every_pair_labelled_is_a_census_with_the_exact_changed_shares():
    fixture = build()
    _label(fixture)
    body = json.loads(_run("estimate_bias", "--study", "bp", "--detector", AGE_GENDER)[0])
    cell = body["pair_change"]["sd15"]["profession"]
    assert cell["age"]["estimate"] == pytest.approx(0.5)
    assert cell["age"]["ci95"] == pytest.approx([0.5, 0.5])
    assert cell["gender"]["estimate"] == pytest.approx(0.5)
    assert cell["skin"]["estimate"] == pytest.approx(0.25)
    assert (cell["skin"]["n_items"], cell["skin"]["n_labelled"]) == (4, 4)
    # The measurements alone: gender changed on nurse/S1 and pilot/S2 -> 0.5.
    assert cell["gender"]["detector_only"] == pytest.approx(0.5)
    assert body["pair_change"]["p2p"]["profession"]["age"]["estimate"] == pytest.approx(0.0)


def test_a_pair_change_study_gets_a_round_of_pairs_and_an_estimate_from_it():
    fixture = build()
    _run("sample_for_labeling", "--study", "bp", "--detector", AGE_GENDER, "--budget", "5", "--seed", "1")
    sampling_round = SamplingRound.objects.get()
    chosen = set(sampling_round.round_items.filter(selected=True).values_list("item_id", flat=True))
    assert chosen
    assert set(Item.objects.filter(pk__in=chosen).values_list("queue", flat=True)) == {2}
    _label(fixture, chosen)
    out, err = _run("estimate_bias", "--study", "bp", "--detector", AGE_GENDER, "--format", "json")
    body = json.loads(out)
    assert body["rounds"] == [1]
    assert "pending" not in err.lower()
    est = body["pair_change"]["sd15"]["profession"]["age"]
    assert set(est) == {
        "estimate",
        "ci95",
        "human_only",
        "detector_only",
        "lambda",
        "effective_labels",
        "n_items",
        "n_labelled",
    }
    csv_text = _run("estimate_bias", "--study", "bp", "--detector", AGE_GENDER, "--format", "csv")[0]
    assert csv_text.splitlines()[0].startswith("t2i_model,domain,attribute,estimate")


def test_the_estimate_page_shows_the_changed_pair_shares(client_for, researcher):
    fixture = build()
    _label(fixture)
    page = client_for(researcher).get("/reports/estimate/?study=bp").content.decode()
    assert "Changed pairs estimated from the measurements and sampled labels" in page
    assert "Label N more" in page


def test_export_sampling_names_pairs_by_key_and_counts_all_three_answers_as_labelled():
    fixture = build()
    _run("sample_for_labeling", "--study", "bp", "--detector", AGE_GENDER, "--budget", "5", "--seed", "1")
    sampling_round = SamplingRound.objects.get()
    chosen = set(sampling_round.round_items.filter(selected=True).values_list("item_id", flat=True))
    _label(fixture, chosen)
    lines = _run("export_sampling", "--study", "bp")[0].strip().splitlines()
    assert lines[0] == "image,round,pi,selected,labelled"
    rows = [line.split(",") for line in lines[1:]]
    assert {row[0] for row in rows} == set(fixture.pairs)
    assert all(row[4] == row[3] for row in rows)  # exactly the drawn pairs were labelled


def test_a_pair_added_after_the_first_round_is_named_as_left_out():
    # The warning every protocol's estimate shares (estimates.report.frame_warnings); pair change
    # used to leave it out. A pair the first round did not see stands for one added after it.
    fixture = build()
    _run("sample_for_labeling", "--study", "bp", "--detector", AGE_GENDER, "--budget", "5", "--seed", "1")
    sampling_round = SamplingRound.objects.get()
    chosen = set(sampling_round.round_items.filter(selected=True).values_list("item_id", flat=True))
    _label(fixture, chosen)
    sampling_round.round_items.filter(selected=False).order_by("item_id")[:1].get().delete()
    body = json.loads(_run("estimate_bias", "--study", "bp", "--detector", AGE_GENDER)[0])
    assert "1 item(s) added after the first round are not in this estimate." in body["warnings"]


def test_the_designs_read_each_pairs_measured_change_and_its_error():
    from protocols.pair_change.estimates import pair_output_codes, pair_residuals

    fixture = build()
    _label(fixture)
    codes = pair_output_codes(fixture.study, AGE_GENDER, "1")
    ids = {key: item.pk for key, item in fixture.pairs.items()}
    # (age, gender, skin), each 0 unchanged, 0.5 in between or unmeasured, 1 changed.
    assert codes[ids["sd15/nurse/S1"]] == (1.0, 1.0, 1.0)
    assert codes[ids["sd15/pilot/S1"]] == (1.0, 0.0, 0.5)  # skin -0.5: (0.5 - 0.2) / 0.8
    assert codes[ids["sd15/pilot/S2"]] == (0.0, 1.0, 1.0)
    residuals = pair_residuals(fixture.study, AGE_GENDER, "1")
    assert residuals[ids["sd15/nurse/S1"]] == pytest.approx(0.0)  # every change seen by both
    assert residuals[ids["sd15/pilot/S1"]] == pytest.approx(0.375**2)
    # Age +0.24 reads 0.05 (people: same), skin -1.2 reads changed (people: same).
    assert residuals[ids["sd15/pilot/S2"]] == pytest.approx(0.05**2 + 1.0)


@pytest.mark.parametrize("design", ["stratified", "active"])
def test_a_pair_change_study_draws_stratified_and_active_rounds(design):
    fixture = build()
    _run("sample_for_labeling", "--study", "bp", "--detector", AGE_GENDER, "--budget", "3", "--seed", "1")
    first = SamplingRound.objects.get()
    _label(fixture, set(first.round_items.filter(selected=True).values_list("item_id", flat=True)))
    _run(
        "sample_for_labeling",
        "--study", "bp", "--detector", AGE_GENDER, "--budget", "2", "--seed", "2", "--design", design,
    )  # fmt: skip
    second = SamplingRound.objects.get(number=2)
    assert second.design == design
    pool = [p for p in second.round_items.values_list("pi", flat=True) if 0 < p < 1]
    assert sum(pool) == pytest.approx(2)


def test_the_estimate_reads_a_stratified_round_by_the_strata_it_was_drawn_by():
    from unittest import mock

    from estimates import report
    from protocols.pair_change.estimates import pair_change_report, pair_output_codes

    fixture = build()
    for number, design in enumerate(("uniform", "stratified"), start=1):
        _run(
            "sample_for_labeling",
            "--study", "bp", "--detector", AGE_GENDER, "--budget", "2", "--seed", str(number), "--design", design,
        )  # fmt: skip
        drawn = SamplingRound.objects.get(number=number).round_items.filter(selected=True)
        _label(fixture, set(drawn.values_list("item_id", flat=True)))
    with mock.patch.object(report, "inclusion", wraps=report.inclusion) as inclusion:
        pair_change_report(fixture.study, AGE_GENDER)
    # As every protocol's: an item drawn before a stratified round is weighed by its stratum's π there.
    assert inclusion.call_args.args[1] == pair_output_codes(fixture.study, AGE_GENDER, "1")
