"""The pair-change pages: the overview (Table 3, the biased words, Figure 4, the human check), its
downloads (CSV, LaTeX, Markdown, SVG, PNG), the drill-down from a word to its pairs, and
permissions."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET

import pytest
from django.urls import reverse

from detectors.models import Prediction
from protocols.pair_change import charts
from protocols.pair_change.sampling import pairs_sample
from studies.models import ImageRole
from tests.factories import FinalLabelFactory, LabelFactory, image_of, question_of
from tests.reports.conftest import report_urls
from tests.reports.pair_change_data import AGE_GENDER, build, measure, pair_key

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def fixture():
    return build()


def _html(response) -> str:
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def _urls() -> list[str]:
    return report_urls(
        "bp", "pair_word", ["profession", "nurse"], table="bias_by_domain", chart="word_scores"
    )


def test_every_pair_change_page_is_refused_to_annotators_outsiders_and_anonymous_visitors(fixture, refused):
    for url in _urls():
        refused(url)


# --- the overview ---------------------------------------------------------------------------------


def test_the_overview_shows_table_3_the_word_lists_the_charts_and_the_human_check(fixture, rita):
    html = _html(rita.get(reverse("reports:overview") + "?study=bp"))
    assert "7 of 7 pairs</strong> scored" in html
    assert 'data-attribute="age">face_age_gender</span>' in html
    assert 'data-attribute="skin">skin_tone</span>' in html
    for key in ("bias_by_domain", "word_mean", "unmeasured", "word_scores", "validation", "confusion_gender"):
        assert f'id="table-{key}"' in html
    # Table 3's sd15 profession row: age 0.64, race (skin) 0.80, gender 0.50, no Ave on a second row.
    row = re.search(
        r"<tr><td class=\"text\">sd15</td><td class=\"text\">profession</td>(.*?)</tr>", html, re.S
    )
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))
    assert cells == ["0.64", "0.80", "0.50", "", "4"]
    first = re.search(
        r"<tr><td class=\"text\">sd15</td><td class=\"text\">personality</td>(.*?)</tr>", html, re.S
    )
    assert re.findall(r"<td[^>]*>([^<]*)</td>", first.group(1))[3] == "0.39"  # Ave, once per model
    # The word lists link each word to its pairs.
    words = re.search(r'data-model="sd15" data-domain="profession">(.*?)</tr>', html, re.S).group(1)
    nurse = reverse("reports:pair_word", args=["profession", "nurse"]) + "?study=bp"
    assert re.search(
        rf'data-direction="m2f"><a href="{re.escape(nurse)}">nurse</a> <span class="muted small">1.00', words
    )
    assert re.search(
        r'data-direction="darker"><a href="[^"]+">pilot</a> <span class="muted small">-0.85', words
    )
    assert 'data-direction="older"><a' in words
    # One Figure 4 per model and domain, drawn for its filters.
    assert 'id="chart-sd15-profession"' in html
    assert 'id="chart-p2p-profession"' in html
    src = (
        reverse("reports:chart_image", args=["word_scores", "svg"])
        + "?study=bp&amp;t2i_model=sd15&amp;category=profession&amp;v="
    )
    assert src in html
    assert "No pair has been drawn for people to check yet" in html


def test_the_human_check_on_the_overview_follows_the_final_answers(fixture, rita):
    pairs_sample(study=fixture.study, attribute="age", sizes={"older": 1, "younger": 1}, seed=0)
    url = reverse("reports:overview") + "?study=bp"
    html = _html(rita.get(url))
    assert 'id="overall-accuracy">\u2013</strong> over 0 checked pairs' in html
    nurse = fixture.pairs[pair_key("sd15", "nurse", "S1")]
    FinalLabelFactory(item=nurse, question=question_of(nurse, "age"), value="older")
    html = _html(rita.get(url))
    assert 'id="overall-accuracy">1.000</strong> over 1 checked pair' in html
    row = re.search(
        r"<tr><td class=\"text\">age</td><td class=\"text\">all</td>(.*?)</tr>", html, re.S
    ).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
    assert cells[:3] == ["1", "1", "100.0 %"]
    assert cells[-1] == "1"  # the younger pair still waits for an answer


def test_the_category_filter_narrows_the_tables_and_charts_to_one_domain(fixture, rita):
    html = _html(rita.get(reverse("reports:overview") + "?study=bp&category=personality", **HX))
    assert "<html" not in html  # the htmx partial
    assert 'id="chart-sd15-personality"' in html
    assert 'id="chart-sd15-profession"' not in html
    assert "Only the domain personality is shown" in html
    body = rita.get(
        reverse("reports:table", args=["bias_by_domain", "csv"]) + "?study=bp&category=personality"
    )
    rows = list(csv.DictReader(io.StringIO(body.content.decode())))
    assert [(r["t2i_model"], r["domain"]) for r in rows] == [("sd15", "personality")]


def test_two_age_detectors_without_a_choice_show_the_reason_and_downloads_answer_400(fixture, rita):
    for item in fixture.pairs.values():
        for role in (ImageRole.INPUT, ImageRole.OUTPUT):
            image = image_of(item, role)
            if not Prediction.objects.filter(image=image, detector="facepp_measure").exists():
                measure(image, "facepp_measure", age=30.0, gender="male")
    html = _html(rita.get(reverse("reports:overview") + "?study=bp"))
    assert re.search(
        r'id="problem">Several detectors measure age in study &#x27;bp&#x27;: face_age_gender, facepp_measure',
        html,
    )
    response = rita.get(reverse("reports:table", args=["bias_by_domain", "csv"]) + "?study=bp")
    assert response.status_code == 400
    assert b"Several detectors measure age" in response.content
    for view in ("reports:chart", "reports:chart_image"):
        assert rita.get(reverse(view, args=["word_scores", "svg"]) + "?study=bp").status_code == 400
    fixture.study.parameters = {"measure": {"age": AGE_GENDER, "gender": AGE_GENDER}}
    fixture.study.save()
    assert 'id="problem"' not in _html(rita.get(reverse("reports:overview") + "?study=bp"))


# --- downloads --------------------------------------------------------------------------------------


def test_every_table_downloads_as_csv_latex_and_markdown(fixture, rita):
    from protocols.pair_change.tables import TABLE_KEYS

    for key in TABLE_KEYS:
        for fmt, start in (("csv", ""), ("tex", "% Needs \\usepackage{booktabs}"), ("md", "## ")):
            response = rita.get(reverse("reports:table", args=[key, fmt]) + "?study=bp")
            assert response.status_code == 200, (key, fmt)
            assert response["Content-Disposition"] == f'attachment; filename="biaslab-{key}-bp.{fmt}"'
            assert response.content.decode().startswith(start)
    tex = rita.get(reverse("reports:table", args=["biased_words", "tex"]) + "?study=bp").content.decode()
    assert r"\multicolumn{2}{c}{Male $\rightarrow$ female}" in tex
    assert r"\begin{table*}" in tex  # fifteen columns: both columns of the page
    word_csv = rita.get(reverse("reports:table", args=["word_scores", "csv"]) + "?study=bp").content.decode()
    pilot = next(r for r in csv.DictReader(io.StringIO(word_csv)) if r["word"] == "pilot")
    assert float(pilot["age"]) == pytest.approx(-0.44)
    assert float(pilot["gender_f2m"]) == 1.0


def test_the_word_score_chart_draws_a_sorted_bar_per_word_and_attribute(fixture, rita):
    response = rita.get(
        reverse("reports:chart", args=["word_scores", "svg"]) + "?study=bp&t2i_model=sd15&category=profession"
    )
    assert response.status_code == 200
    assert (
        response["Content-Disposition"] == 'attachment; filename="biaslab-word_scores-bp-sd15-profession.svg"'
    )
    root = ET.fromstring(response.content)
    ids = {el.get("id") for el in root.iter() if el.get("id")}
    for attribute in ("age", "gender", "skin"):
        assert {charts.svg_id(attribute, "nurse"), charts.svg_id(attribute, "pilot")} <= ids
    assert charts.svg_id("age", "brave") not in ids  # another domain
    png = rita.get(reverse("reports:chart", args=["word_scores", "png"]) + "?study=bp&t2i_model=p2p")
    assert png.content.startswith(PNG_MAGIC)
    # Same data, same bytes.
    again = rita.get(
        reverse("reports:chart", args=["word_scores", "svg"]) + "?study=bp&t2i_model=sd15&category=profession"
    )
    assert again.content == response.content


def test_an_attribute_without_a_source_has_a_note_instead_of_bars():
    from protocols.pair_change.charts import word_score_chart

    svg = word_score_chart(
        [("age", "Age", [("nurse", 0.6), ("pilot", -0.44)]), ("skin", "Skin", None)], "svg", title="t"
    )
    ids = {el.get("id") for el in ET.fromstring(svg).iter() if el.get("id")}
    assert "no-source-skin" in ids
    assert "bar-age-nurse" in ids


# --- the drill-down --------------------------------------------------------------------------------


def test_a_word_opens_its_pairs_with_both_photos_measurements_overlays_and_answers(
    fixture, rita, annotator_a, annotator_b
):
    nurse = fixture.pairs[pair_key("sd15", "nurse", "S1")]
    edit = image_of(nurse, ImageRole.OUTPUT)
    Prediction.objects.filter(image=edit, detector=AGE_GENDER).update(
        output={
            "face": True,
            "age": 60.0,
            "gender": "female",
            "skin_gray": None,
            "n_faces": 2,
            "overlay": "overlays/face_age_gender/ab/ab12.png",
        }
    )
    pairs_sample(study=fixture.study, attribute="age", sizes={"older": 1}, seed=0)
    age = question_of(nurse, "age")
    LabelFactory(item=nurse, question=age, annotator=annotator_a, value="older")
    LabelFactory(item=nurse, question=age, annotator=annotator_b, value="same")
    html = _html(rita.get(reverse("reports:pair_word", args=["profession", "nurse"]) + "?study=bp"))
    assert "“nurse”" in html
    summary = re.search(r'<tr data-model="sd15">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", summary) == [
        "sd15",
        "2",
        "1",
        "1",
        "0.60",
        "0.50",
        "1.00",
        "0.00",
        "0.75",
    ]
    card = re.search(
        rf'<article class="pair report-table" id="pair-{nurse.pk}".*?</article>', html, re.S
    ).group(0)
    seed = image_of(nurse, ImageRole.INPUT)
    assert f'src="{seed.url}"' in card
    assert f'src="{edit.url}"' in card
    assert '<th class="text" scope="row">Age</th><td>30.0 y</td>' in card
    assert '<th class="text" scope="row">Age</th><td>60.0 y</td>' in card
    assert '<th class="text" scope="row">Skin gray</th><td>130.0</td>' in card
    assert "face_age_gender: 2 faces" in card
    assert 'src="/media/overlays/face_age_gender/ab/ab12.png"' in card
    age_row = re.search(r'<tr data-attribute="age">(.*?)</tr>', card, re.S).group(1)
    assert "1.20" in age_row
    assert "yes, as older" in age_row
    assert "anna: Older" in age_row
    assert "ben: No significant difference" in age_row
    gender_row = re.search(r'<tr data-attribute="gender">(.*?)</tr>', card, re.S).group(1)
    assert "male → female" in gender_row
    assert ">no</span>" in gender_row  # not drawn for gender
    # The other pairs of the word are there; brave's are not.
    assert f'id="pair-{fixture.pairs[pair_key("sd15", "nurse", "S2")].pk}"' in html
    assert f'id="pair-{fixture.pairs[pair_key("p2p", "nurse", "S1")].pk}"' in html
    assert 'id="group-p2p"' in html


def test_an_unmeasured_edit_says_so_on_its_pair(fixture, rita):
    html = _html(
        rita.get(reverse("reports:pair_word", args=["personality", "brave"]) + "?study=bp&t2i_model=sd15")
    )
    card = re.search(
        rf'id="pair-{fixture.pairs[pair_key("sd15", "brave", "S1")].pk}".*?</article>', html, re.S
    ).group(0)
    assert '<th class="text" scope="row">Face</th><td>none found</td>' in card
    assert card.count("(unmeasured)") == 3


def test_a_word_without_pairs_is_a_404_and_other_protocols_have_no_word_page(fixture, rita, study):
    assert (
        rita.get(reverse("reports:pair_word", args=["profession", "astronaut"]) + "?study=bp").status_code
        == 404
    )
    assert (
        rita.get(reverse("reports:pair_word", args=["personality", "nurse"]) + "?study=bp").status_code == 404
    )
    assert (
        rita.get(reverse("reports:pair_word", args=["profession", "nurse"]) + "?study=gender").status_code
        == 404
    )


def test_the_detector_filter_of_a_pair_study_lists_its_measurement_detectors(db):
    """Predictions of pair studies sit on input/output images: the filter options see them."""
    from reports.selectors import filter_options
    from tests.reports.pair_change_data import build

    fixture = build()
    detectors = filter_options(study=fixture.study).detectors
    assert detectors, "no detector listed for a pair study"
