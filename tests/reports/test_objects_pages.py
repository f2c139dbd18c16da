"""The object co-occurrence pages: the overview (tests, Table 1 with residuals, Figure 2, the
human check), its downloads (CSV, LaTeX, Markdown, SVG, PNG), the drill-down from a class to its
images drawn with their boxes, the detector choice, and permissions."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET

import pytest
from django.urls import reverse

from protocols.objects import charts
from reports.tables import NO_VALUE
from tests.reports.conftest import report_urls
from tests.reports.test_objects_report import build, predict

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def study():
    return build()


def _html(response) -> str:
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def _urls() -> list[str]:
    return report_urls("cooccur", "object_class", ["tie"], table="contingency", chart="counts")


def test_every_objects_page_is_refused_to_annotators_outsiders_and_anonymous_visitors(study, refused):
    for url in _urls():
        refused(url)


# --- the overview ---------------------------------------------------------------------------------


def test_the_overview_shows_the_tests_the_table_the_chart_and_the_human_check(study, rita):
    html = _html(rita.get(reverse("reports:overview") + "?study=cooccur"))
    assert "9 of 11 images</strong> counted" in html
    assert "with the objects yolo_objects@1 found in them; person counted" in html
    assert "People checked the boxes of 4 of them." in html
    assert "no metadata gender (male or female needed) (1)" in html
    for key in ("tests", "contingency", "by_gender_word", "human_check"):
        assert f'id="table-{key}"' in html
    assert 'id="chart-counts"' in html
    assert reverse("reports:chart_image", args=["counts", "svg"]) + "?study=cooccur&amp;v=" in html
    assert "no χ² test (fewer than two object classes: χ² needs at least two columns)" in html
    assert "confirmed boxes (4 checked images, person counted)" in html
    # Table 1: tie 3 / 0 on sd21, its male residual starred (|r| > 1.96).
    tie_row = re.search(r"<tr><td class=\"text\">tie</td>(.*?)</tr>", html, re.S).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", tie_row)
    assert cells[:3] == ["1", "1", NO_VALUE]  # dalle first (sorted): 1 and 1, one class: no residual
    assert cells[3:5] == ["3", "0"]
    assert re.fullmatch(r"\+\d\.\d\d\*", cells[5])
    link = reverse("reports:object_class", args=["tie"]) + "?study=cooccur"
    assert f'href="{link}"' in html


def test_the_overview_answers_htmx_with_its_results_region(study, rita):
    html = _html(rita.get(reverse("reports:overview") + "?study=cooccur", **HX))
    assert html.lstrip().startswith('<div id="results"')


def test_several_detectors_make_the_overview_ask_for_one(study, rita):
    predict(study.items.first(), ["cup"], detector="detr")
    html = _html(rita.get(reverse("reports:overview") + "?study=cooccur"))
    assert 'id="problem"' in html
    assert "several detectors (detr, yolo_objects)" in html
    chosen = _html(rita.get(reverse("reports:overview") + "?study=cooccur&detector=detr"))
    assert "with the objects detr@1 found in them" in chosen
    refused = rita.get(reverse("reports:table", args=["tests", "csv"]) + "?study=cooccur")
    assert refused.status_code == 400
    assert "several detectors" in refused.content.decode()
    assert rita.get(reverse("reports:chart", args=["counts", "svg"]) + "?study=cooccur").status_code == 400
    assert (
        rita.get(reverse("reports:chart_image", args=["counts", "svg"]) + "?study=cooccur").status_code == 400
    )


# --- downloads ------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["tests", "contingency", "by_gender_word", "human_check"])
@pytest.mark.parametrize("fmt", ["csv", "tex", "md"])
def test_every_table_downloads_in_every_format(study, rita, key, fmt):
    response = rita.get(reverse("reports:table", args=[key, fmt]) + "?study=cooccur")
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="biaslab-{key}-cooccur.{fmt}"'
    assert response.content


def test_the_csv_of_the_tests_holds_raw_numbers(study, rita):
    body = rita.get(reverse("reports:table", args=["tests", "csv"]) + "?study=cooccur").content.decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert [(r["t2i_model"], r["counting"]) for r in rows] == [
        ("dalle", "detections, person counted"),
        ("dalle", "detections, person left out"),
        ("sd21", "detections, person counted"),
        ("sd21", "detections, person left out"),
        ("sd21", "confirmed boxes (4 checked images, person counted)"),
    ]
    assert rows[0]["chi2"] == ""
    assert rows[0]["note"].startswith("fewer than two object classes")
    assert (rows[2]["dof"], rows[2]["n_pairs"]) == ("4", "3")
    assert 0 < float(rows[2]["p_value"]) < 1


def test_the_human_check_csv_has_one_row_per_class(study, rita):
    body = rita.get(reverse("reports:table", args=["human_check", "csv"]) + "?study=cooccur").content.decode()
    rows = {r["class"]: r for r in csv.DictReader(io.StringIO(body))}
    assert list(rows) == ["person", "handbag", "tie", "cup"]
    assert (rows["handbag"]["n_confirmed"], rows["handbag"]["n_rejected"], rows["handbag"]["n_missed"]) == (
        "1",
        "1",
        "1",
    )
    assert float(rows["handbag"]["precision"]) == 0.5


def test_the_chart_is_figure_2_without_person(study, rita):
    svg = rita.get(reverse("reports:chart", args=["counts", "svg"]) + "?study=cooccur").content
    root = ET.fromstring(svg)
    ids = {el.get("id") for el in root.iter() if el.get("id", "").startswith("bar-")}
    assert charts.svg_id("sd21", "male", "tie") in ids
    assert charts.svg_id("sd21", "female", "handbag") in ids
    assert charts.svg_id("dalle", "female", "tie") in ids
    assert not any("person" in i for i in ids)
    png = rita.get(reverse("reports:chart", args=["counts", "png"]) + "?study=cooccur")
    assert png.content.startswith(PNG_MAGIC)
    assert png["Content-Disposition"] == 'attachment; filename="biaslab-counts-cooccur.png"'


def test_chart_panels_sort_classes_by_instances_and_cut_the_rarest():
    report = {
        "objects": {
            "m": {
                "counts": {
                    "person": {"male": 50, "female": 40},
                    "tie": {"male": 5, "female": 0},
                    "cup": {"male": 1, "female": 4},
                    "bowl": {"male": 0, "female": 1},
                }
            }
        }
    }
    assert charts.panels(report) == [("m", [("tie", 5, 0), ("cup", 1, 4), ("bowl", 0, 1)], 3)]
    assert charts.panels(report, top=1) == [("m", [("tie", 5, 0)], 3)]


# --- the drill-down -------------------------------------------------------------------------------


def test_a_class_page_shows_its_images_with_their_boxes_by_model_and_gender(study, rita):
    html = _html(rita.get(reverse("reports:object_class", args=["tie"]) + "?study=cooccur"))
    assert '“tie” <span class="muted small">found by yolo_objects@1</span>' in html
    groups = re.findall(r'data-model="([^"]+)" data-gender="([^"]+)"', html)
    assert groups == [("dalle", "male"), ("dalle", "female"), ("sd21", "male"), ("sd21", "female")]
    sd21_male = html.split('id="group-sd21-male"')[1].split("</section>")[0]
    assert "(2 images, 3 instances)" in sd21_male  # man (2 ties) first, then boy (1 tie)
    assert sd21_male.count('<g class="box focus">') == 3
    assert sd21_male.count('<g class="box other">') == 1  # the man's person box, faded
    assert 'viewBox="0 0 32 32"' in sd21_male
    assert "people: 1 confirmed, 1 rejected" in sd21_male
    assert "not checked by people" in sd21_male  # the boy's boxes came from another detector


def test_a_class_people_said_was_missed_lists_that_image_too(study, rita):
    html = _html(rita.get(reverse("reports:object_class", args=["cup"]) + "?study=cooccur"))
    sd21_male = html.split('id="group-sd21-male"')[1].split("</section>")[0]
    assert "(1 image, 0 instances)" in sd21_male
    assert "people: 0 confirmed, 0 rejected, 1 missed" in sd21_male


def test_class_names_are_read_in_any_spelling_and_unknown_ones_are_404(study, rita):
    assert rita.get(reverse("reports:object_class", args=["Motorbike"]) + "?study=cooccur").status_code == 200
    html = _html(rita.get(reverse("reports:object_class", args=["sports ball"]) + "?study=cooccur"))
    assert "0 images with sports ball" in html
    assert rita.get(reverse("reports:object_class", args=["lamp"]) + "?study=cooccur").status_code == 404


def test_other_studies_have_no_class_page(rita, study):
    from tests.factories import StudyFactory

    StudyFactory(slug="gender")
    assert rita.get(reverse("reports:object_class", args=["tie"]) + "?study=gender").status_code == 404


def test_a_category_filter_is_labelled_as_not_applying_to_the_report(study, rita):
    """The report pairs images across templates (its prompt categories), so it is by definition
    across categories: the page says so rather than silently showing every category."""
    category = study.prompts.order_by("id").first().category
    html = _html(rita.get(reverse("reports:overview"), {"study": "cooccur", "category": category}))
    assert "the category filter does not apply to it" in html
