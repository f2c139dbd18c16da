"""A new user's walk through the few-label estimate: the estimate page in every protocol's
report navigation, sampling while disputes are open (what each drawn item waits for, named by
its image), and a cell whose items are all labelled (its exact human numbers, width 0)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from estimates.models import SamplingRound
from reports.analyses import ANALYSES, ESTIMATE_LINK, analysis_for
from studies.models import Item
from studies.protocols import protocol_spec
from tests.estimates.conftest import finish_answers
from tests.estimates.test_questions import q_study  # noqa: F401 - the fixture
from tests.factories import LabelFactory

pytestmark = pytest.mark.django_db


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_every_protocol_with_an_estimate_links_the_estimate_page_from_its_reports():
    with_estimate = [key for key in ANALYSES if protocol_spec(key).estimates]
    assert {"gender", "attributes", "pair_change", "objects", "questions"} <= set(with_estimate)
    for key in ANALYSES:
        links = analysis_for(key).nav_links
        assert (ESTIMATE_LINK in links) == bool(protocol_spec(key).estimates), key
        assert list(links).count(ESTIMATE_LINK) <= 1


def test_a_questions_report_page_shows_the_estimate_link(q_study, client_for, researcher):  # noqa: F811
    page = client_for(researcher).get("/reports/?study=qe").content.decode()
    assert 'href="/reports/estimate/?study=qe"' in page
    assert "Estimate from few labels" in page


@pytest.fixture
def disputed(sampled_study, annotator_a, annotator_b):
    """Seven items with both annotators' labels, which disagree: disputed, no final label."""
    items = sampled_study.items[:7]
    for item in items:
        LabelFactory(item=item, annotator=annotator_a, value="male")
        LabelFactory(item=item, annotator=annotator_b, value="female")
    return sampled_study, items


def test_sampling_while_disputes_are_open_says_what_each_drawn_item_waits_for(disputed):
    sampled_study, _ = disputed
    n = len(sampled_study.items)
    out, _ = _run(
        "sample_for_labeling", "--study", "gender", "--detector", "fake", "--budget", str(n), "--seed", "1"
    )
    assert f"{n - 7} queued first for labelling" in out
    assert "7 disputed: they have all their labels and wait for a researcher to settle them" in out
    text, err = _run(
        "estimate_bias", "--study", "gender", "--detector", "fake", "--format", "json", "--bootstrap", "0"
    )
    body = json.loads(text)
    pending = body["sdxl"]["pending"] + body["sd3"]["pending"]
    assert sum(p["waiting_for_dispute"] for p in pending) == 7
    assert sum(p["waiting_for_labels"] for p in pending) == n - 7
    assert all(not name.isdigit() for p in pending for name in p["images"])
    assert "are disputed and wait for a researcher to settle them" in err
    assert "draw one" not in text


def test_a_drawn_round_is_named_in_the_warning_with_its_items_named_by_image(q_study):  # noqa: F811
    study, _ = q_study
    _run("sample_for_labeling", "--study", "qe", "--detector", "llava", "--budget", "6", "--seed", "2")
    text, err = _run("estimate_bias", "--study", "qe", "--detector", "llava", "--format", "json")
    body = json.loads(text)
    assert not any("draw one" in w for w in body["warnings"]), body["warnings"]
    assert body["warnings"][0].startswith("Round 1 is drawn and waits for ")
    assert "item(s) to be labelled" in body["warnings"][0]
    names = set(Item.objects.filter(study=study).values_list("key", flat=True))
    images = body["pending"][0]["images"]
    assert images
    assert all(not name.isdigit() for name in images)
    assert body["pending"][0]["waiting_for_labels"] == body["pending"][0]["pending_images"]
    assert names  # named by path or key, never by the internal id
    assert "wait for labels" in err


def test_a_cell_whose_items_are_all_labelled_gives_the_exact_human_numbers(q_study):  # noqa: F811
    study, truth = q_study
    _run("sample_for_labeling", "--study", "qe", "--detector", "llava", "--budget", "2", "--seed", "5")
    assert SamplingRound.objects.get().n_selected <= 4
    finish_answers(study, truth, Item.objects.filter(study=study))  # every item labelled afterwards
    text, _ = _run("estimate_bias", "--study", "qe", "--detector", "llava", "--format", "json")
    body = json.loads(text)
    groups = body["questions"]["age"]["sdxl"]["groups"]
    young_light = sum(
        1
        for i, t in truth.items()
        if t["age"] == "young" and Item.objects.get(pk=i).metadata["skin"] == "light"
    )
    share = groups["light"]["shares"]["young"]
    assert share["estimate"] == pytest.approx(young_light / 20)
    assert share["ci95"] == pytest.approx([young_light / 20, young_light / 20])
    for question in body["questions"].values():
        for cell in question.values():
            for group in cell["groups"].values():
                for est in group["shares"].values():
                    assert est["estimate"] is not None
                    assert est["ci95"][0] == pytest.approx(est["ci95"][1])
            for est in cell["max_gap"].values():
                assert est["estimate"] is not None
                assert est["ci95"] is not None


def test_every_protocols_estimate_table_has_the_same_labelled_headers_and_dashes(
    q_study,  # noqa: F811
    client_for,
    researcher,
):
    _run("sample_for_labeling", "--study", "qe", "--detector", "llava", "--budget", "6", "--seed", "2")
    response = client_for(researcher).get("/reports/estimate/?study=qe")
    table = response.context["table"]
    labels = [c.label for c in table.columns]
    assert {"95 % interval", "Labels-only 95 % interval", "λ", "Effective labels", "T2I model"} <= set(labels)
    assert not {"ci95", "human only ci95", "lambda"} & set(labels)
    texts = [cell.text for row in table.rows for cell in row]
    assert "" not in texts
    assert "\u2013" in texts  # no complete round: the undefined figures are dashes, as for gender
    page = response.content.decode()
    assert page.count(">Drawn<") == 1
    assert ">Drawn on<" in page


def test_the_width_chart_waits_for_two_points_and_names_each_line_once():
    from estimates.charts import Series, series_width_chart_svg

    one = [Series(f"s{k}", ((10, 0.2, 0.3),)) for k in range(4)]
    assert series_width_chart_svg(one) is None
    two = [Series(f"s{k}", ((10, 0.2, 0.3), (20, 0.1, 0.2))) for k in range(4)]
    svg = series_width_chart_svg(two).decode()
    assert svg.count("detector + labels") == 1
    assert svg.count("labels only") == 1
