"""The GEP pages: the overview with its vector charts and tables, their downloads (CSV,
LaTeX, Markdown, SVG, PNG), the drill-down from an attribute to its images, permissions."""

from __future__ import annotations

import csv
import io
import math
import xml.etree.ElementTree as ET

import pytest
from django.urls import reverse
from PIL import Image

from protocols.attributes import charts, tables
from reports.analyses import analysis_of
from reports.selectors import Scope
from reports.tables import NO_VALUE
from studies.models import Study
from tests.factories import PredictionFactory, StudyFactory, image_of
from tests.reports import attributes_data as data
from tests.reports.conftest import report_urls

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def fx(annotator_a, annotator_b, annotator_c):
    return data.build(data.attributes_study(), [annotator_a, annotator_b, annotator_c])


@pytest.fixture
def result(fx):
    return analysis_of(fx.study).compute(Scope(fx.study))


def _urls() -> list[str]:
    return report_urls("gep", "attribute", ["dress", "neutral"], table="gep_scores", chart="gep_neutral")


# --- permissions -----------------------------------------------------------------------------------


def test_every_gep_page_is_refused_to_annotators_outsiders_and_anonymous_visitors(fx, refused):
    for url in _urls():
        refused(url)


def test_only_get_is_allowed_for_researchers(fx, rita):
    for url in _urls():
        assert rita.post(url).status_code == 405, url


# --- overview ------------------------------------------------------------------------------------------


def test_the_overview_shows_a_vector_chart_per_model_and_setting_and_the_papers_tables(fx, rita):
    html = rita.get(reverse("reports:overview"), {"study": "gep"}).content.decode()
    for model, setting in (("sdxl", "neutral"), ("sdxl", "explicit"), ("sd3", "neutral")):
        assert f'id="chart-{model}-{setting}"' in html
    assert 'id="chart-sd3-explicit"' not in html
    for key in tables.PAPER:
        assert f'id="table-{key}"' in html, key
    assert 'id="table-judges"' not in html  # no judge answered
    assert "11 of 13 images" in html
    assert "no metadata gender (woman or man) (1)" in html
    assert reverse("reports:attribute", args=["tie", "explicit"]) + "?study=gep" in html


@pytest.mark.parametrize(
    ("labels", "rule", "said"),
    [
        (
            3,
            "majority",
            "three annotators per image; an answer is final when more than half of them (2 of 3) agree",
        ),
        (2, "unanimous", "two annotators per image; an answer is final when both agree"),
        (
            5,
            "majority",
            "five annotators per image; an answer is final when more than half of them (3 of 5) agree",
        ),
    ],
)
def test_the_overview_states_the_studys_own_rule_for_a_final_answer(fx, rita, labels, rule, said):
    Study.objects.filter(pk=fx.study.pk).update(labels_per_item=labels, agreement=rule)
    html = rita.get(reverse("reports:overview"), {"study": "gep"}).content.decode()
    coverage = html[html.index('id="coverage"') :].split("</p>")[0]
    assert said in coverage
    assert "three annotators, the majority decides" not in html


def test_the_overview_chart_urls_change_when_the_data_changes(fx, rita):
    from tests.factories import FinalLabelFactory

    def srcs() -> list[str]:
        html = rita.get(reverse("reports:overview"), {"study": "gep"}).content.decode()
        return [
            line
            for line in html.split('"')
            if line.startswith(reverse("reports:chart_image", args=["gep_neutral", "svg"]))
        ]

    before = srcs()
    assert len(before) == 2  # sdxl and sd3
    FinalLabelFactory(item=fx.items["M3"], question=fx.study.questions.get(key="boots"), value="yes")
    after = srcs()
    assert len(after) == 2
    assert set(after).isdisjoint(before)


def test_the_overview_renders_only_its_results_for_htmx(fx, rita):
    html = rita.get(reverse("reports:overview"), {"study": "gep"}, **HX).content.decode()
    assert html.lstrip().startswith('<div id="results"')
    assert "<html" not in html


def test_an_attributes_study_without_gep_items_says_what_to_import(db, rita):
    data.attributes_study(slug="empty")
    html = rita.get(reverse("reports:overview"), {"study": "empty"}).content.decode()
    assert "import images with the columns gender (woman|man), setting (neutral|explicit)" in html


# --- downloads ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", tables.TABLE_KEYS)
@pytest.mark.parametrize("fmt", ["csv", "tex", "md"])
def test_every_table_downloads_in_every_format(fx, rita, key, fmt):
    response = rita.get(reverse("reports:table", args=[key, fmt]), {"study": "gep"})
    assert response.status_code == 200
    assert f'filename="biaslab-{key}-gep.{fmt}"' in response["Content-Disposition"]
    body = response.content.decode()
    if fmt == "tex":
        assert r"\toprule" in body
        assert r"\bottomrule" in body


def test_the_gep_scores_csv_holds_raw_values_and_blanks_for_undefined(fx, rita):
    body = rita.get(reverse("reports:table", args=["gep_scores", "csv"]), {"study": "gep"}).content.decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert rows[0] == {
        "t2i_model": "sd3",
        "neutral_gep": str(1 / 3),
        "neutral_n_woman": "1",
        "neutral_n_man": "1",
        "explicit_gep": "",
        "explicit_n_woman": "",
        "explicit_n_man": "",
    }
    assert (rows[1]["t2i_model"], rows[1]["neutral_gep"], rows[1]["explicit_gep"]) == ("sdxl", "0.5", "")


@pytest.mark.parametrize("fmt", ["svg", "png"])
@pytest.mark.parametrize("name", ["gep_neutral", "gep_explicit"])
def test_every_chart_downloads_as_svg_and_png(fx, rita, name, fmt):
    response = rita.get(reverse("reports:chart", args=[name, fmt]), {"study": "gep", "t2i_model": "sdxl"})
    assert response.status_code == 200
    assert f'filename="biaslab-{name}-gep-sdxl.{fmt}"' in response["Content-Disposition"]
    if fmt == "png":
        assert response.content.startswith(PNG_MAGIC)
        assert Image.open(io.BytesIO(response.content)).size[0] > 500
    else:
        ET.fromstring(response.content)


def test_an_unknown_chart_or_table_is_404(fx, rita):
    assert rita.get(reverse("reports:chart", args=["heatmap", "svg"]), {"study": "gep"}).status_code == 404
    assert rita.get(reverse("reports:table", args=["filtering", "csv"]), {"study": "gep"}).status_code == 404
    assert rita.get(reverse("reports:heatmap"), {"study": "gep"}).status_code == 404


# --- the chart itself --------------------------------------------------------------------------------


def _ids(svg: bytes) -> set[str]:
    return {el.get("id") for el in ET.fromstring(svg).iter() if el.get("id")}


def test_the_vector_chart_draws_a_bar_per_defined_entry_and_marks_the_undefined(result):
    svg = charts.gep_vector_chart(result.report, "svg", setting="explicit", keys=result.keys)
    ids = _ids(svg)
    assert {"bar-human-dress", "bar-human-tie", "no-value-human-boots"} <= ids
    assert "bar-human-boots" not in ids
    assert {"no-value-clip-boots", "no-value-clip-dress", "no-value-broken-tie"} <= ids  # no scores


def test_the_vector_chart_puts_every_model_in_a_row_and_the_filter_narrows_it(result):
    both = charts.vector_panels(result.report, setting="neutral")
    assert [model for model, _ in both] == ["sd3", "sdxl"]
    assert [source for source, _, _ in both[1][1]] == ["human", "broken", "clip"]
    assert [
        model for model, _ in charts.vector_panels(result.report, setting="neutral", models=["sdxl"])
    ] == ["sdxl"]


def test_the_vector_chart_is_deterministic_and_says_so_when_empty(result):
    first = charts.gep_vector_chart(result.report, "svg", setting="neutral", keys=result.keys)
    assert first == charts.gep_vector_chart(result.report, "svg", setting="neutral", keys=result.keys)
    empty = charts.gep_vector_chart({"attributes": {}}, "png", setting="neutral", keys=result.keys)
    assert empty.startswith(PNG_MAGIC)
    with pytest.raises(charts.UnknownChart):
        charts.gep_vector_chart(result.report, "svg", setting="both", keys=result.keys)


# --- tables ---------------------------------------------------------------------------------------------


def test_table_6_ranks_each_sources_scores_and_gives_its_kendall_tau(result):
    table = tables.score_ranking_table(result)
    rows = {row[0].value: row for row in table.rows}
    assert [c.key for c in table.columns] == [
        "source",
        "neutral_sd3",
        "neutral_sdxl",
        "explicit_sd3",
        "explicit_sdxl",
        "kendall_tau_b",
    ]
    assert [c.text for c in rows["human"][1:3]] == ["0.333 (#1)", "0.500 (#2)"]
    assert rows["human"][5].text == NO_VALUE
    assert rows["clip"][5].value == pytest.approx(1.0)
    assert table.groups == (("", 1), ("Neutral", 2), ("Explicit", 2), ("", 1))


def test_the_vector_agreement_table_marks_the_best_tau_of_a_cell(fx):
    # A second detector on sdxl neutral, vector (.8, -.8, .8) against the human (0, 1, -.5): two
    # discordant pairs, one tied in the detector's vector: tau-b = -2 / sqrt(2 * 3).
    for name, by_key in (("W1", (0.9, 0.1, 0.9)), ("M1", (0.1, 0.9, 0.1))):
        PredictionFactory(
            image=image_of(fx.items[name]),
            detector="cc",
            version="1",
            kind="attributes",
            output={"scores": dict(zip(data.KEYS, by_key, strict=True))},
        )
    result = analysis_of(fx.study).compute(Scope(fx.study))
    rows = tables.vector_agreement_table(result).rows
    sdxl = [r for r in rows if r[0].value == "sdxl" and r[1].value == "neutral"]
    assert [(r[2].value, r[4].value, r[4].mark) for r in sdxl] == [
        ("broken", None, ""),
        ("cc", pytest.approx(-2 / math.sqrt(6)), ""),
        ("clip", 1.0, "best"),
    ]


def test_the_frequency_table_shows_the_counts_behind_each_share(result):
    rows = tables.frequencies_table(result).rows
    man = next(r for r in rows if (r[0].value, r[1].value, r[2].value) == ("sdxl", "neutral", "man"))
    assert man[3].title == "1 yes of 2 answered; 1 without a final answer"
    assert man[-1].value == 3  # M3 has no final answer to any of the three questions


def test_the_agreement_table_ends_with_all_questions_pooled(result):
    rows = tables.agreement_table(result).rows
    assert [r[0].value for r in rows] == ["boots", "dress", "tie", "all"]
    assert rows[1][6].value == 1  # the dress dispute
    assert rows[-1][5].value == 4  # boots W1, W2, M3 and dress M3


# --- the drill-down -------------------------------------------------------------------------------------


def test_an_attribute_shows_its_yes_and_no_images_for_women_and_men_with_answers_and_scores(fx, rita):
    html = rita.get(
        reverse("reports:attribute", args=["boots", "neutral"]), {"study": "gep", "t2i_model": "sdxl"}
    ).content.decode()
    woman_yes = html.split('id="group-sdxl-woman-yes"')[1].split("</section>")[0]
    assert f'data-item-id="{fx.items["W1"].pk}"' in woman_yes
    assert 'anna</span>: <span class="tag">yes' in woman_yes
    assert 'cleo</span>: <span class="tag">no' in woman_yes
    assert "clip: 0.900" in woman_yes
    assert f"broken: {NO_VALUE}" in woman_yes
    woman_no = html.split('id="group-sdxl-woman-no"')[1].split("</section>")[0]
    assert f'data-item-id="{fx.items["W2"].pk}"' in woman_no
    man_none = html.split('id="group-sdxl-man-none"')[1].split("</section>")[0]
    assert f'data-item-id="{fx.items["M3"].pk}"' in man_none
    assert 'final: <span class="muted">none yet' in man_none
    assert 'id="group-sd3-' not in html  # the model filter applies


def test_an_explicit_attribute_shows_only_the_images_its_prompt_names(fx, rita):
    html = rita.get(
        reverse("reports:attribute", args=["dress", "explicit"]), {"study": "gep"}
    ).content.decode()
    shown = {int(part.split('"')[0]) for part in html.split('data-item-id="')[1:]}
    assert shown == {fx.items["W3"].pk, fx.items["M4"].pk}


def test_an_attribute_page_lists_its_disputes_with_a_link_to_settle_them(fx, rita):
    html = rita.get(
        reverse("reports:attribute", args=["dress", "neutral"]), {"study": "gep"}
    ).content.decode()
    disputes = html.split('id="disputes"')[1]
    assert reverse("annotate:dispute_question", args=[fx.items["M3"].pk, "dress"]) in disputes
    boots = rita.get(
        reverse("reports:attribute", args=["boots", "neutral"]), {"study": "gep"}
    ).content.decode()
    assert "No disputed answer" in boots


def test_an_attribute_summary_gives_frequencies_vector_entries_and_auc(fx, rita):
    html = rita.get(
        reverse("reports:attribute", args=["tie", "neutral"]), {"study": "gep", "t2i_model": "sdxl"}
    ).content.decode()
    summary = html.split('id="attribute-summary"')[1].split("</table>")[0]
    assert "<td>\u22120.500</td>" in summary  # f_woman 0 minus f_man 1/2
    assert "<td>0.667</td>" in summary  # clip's ROC-AUC on tie


def test_unknown_attributes_settings_and_studies_without_the_page_are_404(fx, rita, study):
    assert (
        rita.get(reverse("reports:attribute", args=["wings", "neutral"]), {"study": "gep"}).status_code == 404
    )
    assert rita.get(reverse("reports:attribute", args=["boots", "both"]), {"study": "gep"}).status_code == 404
    assert (
        rita.get(reverse("reports:attribute", args=["boots", "neutral"]), {"study": "gender"}).status_code
        == 404
    )


def test_the_drill_down_renders_its_results_partial_for_htmx(fx, rita):
    html = rita.get(
        reverse("reports:attribute", args=["boots", "neutral"]), {"study": "gep"}, **HX
    ).content.decode()
    assert html.lstrip().startswith('<div id="results"')


def test_a_full_fifteen_question_study_renders(db, rita):
    study = data.attributes_study(slug="full", keys=None)
    data.gep_item(study, "sdxl", "woman", "neutral", finals=dict.fromkeys(["boots", "hat"], "yes"))
    data.gep_item(study, "sdxl", "man", "explicit", "tie", finals={"tie": "no"})
    assert rita.get(reverse("reports:overview"), {"study": "full"}).status_code == 200
    assert (
        rita.get(reverse("reports:attribute", args=["hat", "neutral"]), {"study": "full"}).status_code == 200
    )
    StudyFactory(slug="other")  # with several studies, the page names its own
    assert (
        rita.get(reverse("reports:attribute", args=["hat", "neutral"]), {"study": "full"}).status_code == 200
    )


def test_a_category_filter_is_labelled_as_not_applying_to_the_report(fx, rita):
    """The GEP report's settings are its own columns, so it is by definition across
    categories: the page says so rather than silently showing every category."""
    category = Study.objects.get(slug="gep").prompts.order_by("id").first().category
    html = rita.get(reverse("reports:overview"), {"study": "gep", "category": category}).content.decode()
    assert "the category filter does not apply to it" in html
