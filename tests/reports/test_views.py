"""Dashboard pages and downloads: permissions, htmx partials, content on the fixture study."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from protocols.gender import views as gender_views
from tests.factories import FinalLabelFactory, ItemFactory, PromptFactory, StudyFactory
from tests.reports import dashboard_data
from tests.reports.dashboard_data import predict

pytestmark = pytest.mark.django_db


def _urls(fx) -> list[str]:
    return [
        reverse("reports:overview"),
        reverse("reports:heatmap"),
        reverse("reports:prompt", args=[fx.lawyer.pk]),
        reverse("reports:detector", args=["fake"]),
        reverse("reports:table", args=["model_bias", "csv"]),
        reverse("reports:table", args=["filtering", "tex"]),
        reverse("reports:chart", args=["heatmap", "svg"]),
        reverse("reports:chart", args=["histogram", "png"]),
    ]


HX = {"HTTP_HX_REQUEST": "true"}


# --- permissions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["annotator_a", "outsider"])
@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
def test_every_page_is_forbidden_to_annotators_and_outsiders(fx, request, client_for, persona, method):
    client = client_for(request.getfixturevalue(persona))
    for url in _urls(fx):
        assert getattr(client, method)(url).status_code == 403, url


def test_anonymous_users_are_sent_to_the_login_page(fx, client):
    for url in _urls(fx):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url


@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_researchers_and_admins_may_open_every_page(fx, request, client_for, persona):
    client = client_for(request.getfixturevalue(persona))
    for url in _urls(fx):
        assert client.get(url).status_code == 200, url


def test_researchers_may_only_read(fx, rita):
    assert rita.post(reverse("reports:overview")).status_code == 405


def test_home_sends_researchers_to_the_overview(fx, rita):
    assert rita.get("/")["Location"] == reverse("reports:overview")


# --- overview -------------------------------------------------------------------------------------


def test_overview_says_how_many_images_the_report_covers(fx, rita):
    html = rita.get(reverse("reports:overview")).content.decode()
    assert "Reports use the final labels that exist: <strong>10 of 11 images</strong>" in html


def test_overview_shows_every_table_with_downloads(fx, rita):
    html = rita.get(reverse("reports:overview")).content.decode()
    for key in ("model_bias", "prompt_difference", "filtering", "label_shares", "categories"):
        assert f'id="table-{key}"' in html
        assert reverse("reports:table", args=[key, "csv"]) in html
        assert reverse("reports:table", args=[key, "tex"]) in html
    assert f'src="{reverse("reports:chart_image", args=["model_bias", "svg"])}?study=gender"' in html


def test_overview_marks_best_and_worst_detector(fx, rita):
    html = rita.get(reverse("reports:overview")).content.decode()
    assert " mark-best" in html
    assert " mark-worst" in html


def test_overview_is_a_full_page_and_its_results_partial_for_htmx(fx, rita):
    full = rita.get(reverse("reports:overview")).content.decode()
    partial = rita.get(reverse("reports:overview"), **HX).content.decode()
    assert "<html" in full
    assert "<html" not in partial
    assert partial.lstrip().startswith('<div id="results"')
    assert 'id="table-filtering"' in partial


def test_overview_filters_by_model(fx, rita):
    rows = _csv(rita.get(reverse("reports:table", args=["label_shares", "csv"]), {"t2i_model": "sd3"}))
    assert [r["t2i_model"] for r in rows] == ["sd3"]
    assert rows[0]["n_images"] == "4"


def test_unknown_filter_value_is_a_clear_400(fx, rita):
    response = rita.get(reverse("reports:overview"), {"t2i_model": "dalle"})
    assert response.status_code == 400
    assert "No T2I model &#x27;dalle&#x27;" in response.content.decode()


def test_unknown_study_is_a_clear_400(fx, rita):
    response = rita.get(reverse("reports:overview"), {"study": "nope"})
    assert response.status_code == 400
    assert "no study &#x27;nope&#x27;" in response.content.decode()


def test_overview_without_final_labels_says_so(study, rita):
    html = rita.get(reverse("reports:overview")).content.decode()
    assert "No image has a final label yet" in html


# --- downloads ------------------------------------------------------------------------------------


def _csv(response) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_table_csv_download_has_type_filename_and_columns(fx, rita):
    response = rita.get(reverse("reports:table", args=["filtering", "csv"]), {"study": "gender"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="biaslab-filtering-gender.csv"'
    rows = _csv(response)
    assert list(rows[0]) == [
        "detector", "version", "precision", "recall", "f1", "filter_rate", "accuracy_male", "accuracy_female",
        "accuracy_overall", "n_accuracy", "tp", "fp", "fn", "tn",
    ]  # fmt: skip
    fake = next(r for r in rows if r["detector"] == "fake")
    assert (fake["tp"], fake["fp"], fake["fn"], fake["tn"]) == ("6", "1", "1", "2")


def test_model_bias_csv_holds_human_and_detector_rows(fx, rita):
    rows = _csv(rita.get(reverse("reports:table", args=["model_bias", "csv"])))
    assert [r["source"] for r in rows] == ["Human (ground truth)", "facey", "fake"]
    assert float(rows[0]["sdxl_score"]) == pytest.approx(1 / 3)
    assert rows[0]["sdxl_n_images"] == "6"


def test_latex_download_escapes_prompt_words(fx, rita):
    response = rita.get(reverse("reports:table", args=["prompt_scores", "tex"]))
    assert response["Content-Type"] == "application/x-tex; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="biaslab-prompt_scores-gender.tex"'
    latex = response.content.decode()
    assert r"R\&D\_lab 100\%" in latex
    assert r"\toprule" in latex


def test_every_overview_table_downloads_in_every_format(fx, rita):
    for key in (
        "model_bias",
        "prompt_difference",
        "filtering",
        "label_shares",
        "categories",
        "prompt_scores",
    ):
        assert rita.get(reverse("reports:table", args=[key, "csv"])).status_code == 200, key
        assert rita.get(reverse("reports:table", args=[key, "tex"])).content.startswith(b"% Needs"), key
        markdown = rita.get(reverse("reports:table", args=[key, "md"]))
        assert markdown["Content-Type"] == "text/markdown; charset=utf-8", key
        assert markdown.content.startswith(b"## "), key


def test_prompt_scores_csv_has_human_and_detector_columns(fx, rita):
    rows = _csv(rita.get(reverse("reports:table", args=["prompt_scores", "csv"]), {"detector": "fake"}))
    lawyer = next(r for r in rows if r["word"] == "lawyer")
    assert float(lawyer["sdxl_human"]) == pytest.approx(1 / 3)
    assert float(lawyer["sdxl_fake"]) == 1.0
    assert float(lawyer["sd3_fake"]) == -1.0
    rnd = next(r for r in rows if r["word"] == dashboard_data.RND_WORD)
    assert rnd["sdxl_human"] == ""


def test_confusion_table_downloads_for_a_detector(fx, rita):
    rows = _csv(rita.get(reverse("reports:table", args=["confusion", "csv"]), {"detector": "fake"}))
    female = next(r for r in rows if r["human_label"] == "Female")
    assert (female["male"], female["female"], female["filtered"], female["total"]) == ("2", "2", "0", "4")


def test_confusion_table_without_a_detector_is_a_clear_400(fx, rita):
    response = rita.get(reverse("reports:table", args=["confusion", "csv"]))
    assert response.status_code == 400
    assert "needs a detector" in response.content.decode()


def test_unknown_table_or_format_is_404(fx, rita):
    assert rita.get(reverse("reports:table", args=["nope", "csv"])).status_code == 404
    assert rita.get(reverse("reports:table", args=["filtering", "xlsx"])).status_code == 404


@pytest.mark.parametrize(("name", "fmt", "magic"), [
    ("heatmap", "svg", b"<?xml"), ("heatmap", "png", b"\x89PNG"),
    ("histogram", "svg", b"<?xml"), ("histogram", "png", b"\x89PNG"),
    ("model_bias", "svg", b"<?xml"), ("model_bias", "png", b"\x89PNG"),
])  # fmt: skip
def test_every_chart_downloads_as_svg_and_png(fx, rita, name, fmt, magic):
    response = rita.get(reverse("reports:chart", args=[name, fmt]))
    assert response["Content-Type"] == {"svg": "image/svg+xml", "png": "image/png"}[fmt]
    assert response["Content-Disposition"].startswith(f'attachment; filename="biaslab-{name}')
    assert response.content.startswith(magic)


def test_histogram_of_a_detector_is_named_after_it(fx, rita):
    response = rita.get(reverse("reports:chart", args=["histogram", "svg"]), {"source": "fake"})
    assert response["Content-Disposition"] == 'attachment; filename="biaslab-histogram-fake-gender.svg"'


def test_unknown_chart_is_404(fx, rita):
    assert rita.get(reverse("reports:chart", args=["pie", "svg"])).status_code == 404
    assert rita.get(reverse("reports:chart", args=["heatmap", "gif"])).status_code == 404


# --- heatmap --------------------------------------------------------------------------------------


def test_heatmap_shows_figures_and_a_clickable_prompt_table(fx, rita):
    html = rita.get(reverse("reports:heatmap")).content.decode()
    assert f'src="{reverse("reports:chart_image", args=["heatmap", "svg"])}?study=gender"' in html
    assert (
        f'src="{reverse("reports:chart_image", args=["histogram", "svg"])}?study=gender&amp;source=human"'
        in html
    )
    assert reverse("reports:prompt", args=[fx.lawyer.pk]) in html
    assert 'class="none"' in html  # sdxl R&D has no clear image
    assert "R&amp;D_lab 100%" in html


def test_heatmap_counts_scored_and_unscored_outputs(fx, rita):
    html = rita.get(reverse("reports:heatmap")).content.decode()
    assert "3 prompt \u00d7 model outputs with a score, 1 without a clear image" in html


def test_heatmap_partial_for_htmx(fx, rita):
    html = rita.get(reverse("reports:heatmap"), **HX).content.decode()
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="results"')


def test_heatmap_category_filter_keeps_only_that_category(fx, rita):
    html = rita.get(reverse("reports:heatmap"), {"category": "place"}).content.decode()
    assert ">lawyer<" not in html
    assert "R&amp;D_lab 100%" in html


# --- drill-downs ----------------------------------------------------------------------------------


def test_prompt_drilldown_shows_labels_final_label_and_verdicts_side_by_side(fx, rita):
    html = rita.get(reverse("reports:prompt", args=[fx.lawyer.pk])).content.decode()
    assert html.count('class="thumb"') == 7
    assert html.count("anna: ") == 7
    assert html.count("ben: ") == 6
    assert "none yet" in html  # image 11 has no final label
    assert "No face" in html  # the filter reason of image 2
    assert html.count(' disagrees" title=') == 3 + 2  # fake: images 2, 3, 4; facey: images 3, 4
    assert '<span class="tag failed"' in html


def test_prompt_drilldown_summarises_counts_per_model(fx, rita):
    response = rita.get(reverse("reports:prompt", args=[fx.lawyer.pk]))
    summary = {s["t2i_model"]: s for s in response.context["summary"]}
    assert (summary["sdxl"]["n_images"], summary["sdxl"]["n_final"], summary["sdxl"]["n_male"]) == (5, 4, 2)
    assert summary["sdxl"]["score"] == pytest.approx(1 / 3)
    assert summary["sd3"]["score"] == -1.0


def test_prompt_drilldown_filters_by_model_and_renders_partial(fx, rita):
    html = rita.get(
        reverse("reports:prompt", args=[fx.lawyer.pk]), {"t2i_model": "sd3"}, **HX
    ).content.decode()
    assert "<html" not in html
    assert html.count('class="thumb"') == 2


def test_unknown_prompt_is_404(fx, rita):
    assert rita.get(reverse("reports:prompt", args=[999999])).status_code == 404


def test_detector_drilldown_shows_its_confusion(fx, rita):
    response = rita.get(reverse("reports:detector", args=["fake"]))
    assert response.context["filtering"] == {"tp": 6, "fn": 1, "fp": 1, "tn": 2}
    html = response.content.decode()
    assert "TP 6" in html
    assert "10 images with a final human label" in html


def test_detector_gallery_lists_its_disagreements_by_kind(fx, rita):
    response = rita.get(reverse("reports:detector", args=["fake"]), {"kind": "wrong_gender"})
    assert [p.item_id for p in response.context["page"]] == [fx.items[2].pk, fx.items[9].pk]
    kinds = {k["key"]: k["n"] for k in response.context["kinds"]}
    assert kinds == {"all": 4, "false_keep": 1, "false_filter": 1, "wrong_gender": 2}


def test_detector_gallery_is_paginated_and_swaps_alone_for_htmx(fx, rita, monkeypatch):
    monkeypatch.setattr(gender_views, "GALLERY_PAGE_SIZE", 3)
    url = reverse("reports:detector", args=["fake"])
    first = rita.get(url)
    assert first.context["page"].paginator.num_pages == 2
    html = rita.get(url, {"page": 2}, HTTP_HX_TARGET="gallery", **HX).content.decode()
    assert html.lstrip().startswith('<section id="gallery"')
    assert "page 2 of 2 (4 images)" in html
    assert html.count('class="disagreement"') == 1


def test_detector_drilldown_filtered_by_model(fx, rita):
    response = rita.get(reverse("reports:detector", args=["fake"]), {"t2i_model": "sd3"})
    assert response.context["confusion"].total == 4
    assert [k["n"] for k in response.context["kinds"] if k["key"] == "all"] == [1]


def test_unknown_detector_is_404_and_unknown_gallery_400(fx, rita):
    assert rita.get(reverse("reports:detector", args=["nope"])).status_code == 404
    assert rita.get(reverse("reports:detector", args=["fake"]), {"kind": "odd"}).status_code == 400


def test_with_several_studies_the_overview_asks_which_and_each_report_keeps_to_its_study(fx, rita):
    other = StudyFactory(name="Other study", slug="other")
    FinalLabelFactory(item=ItemFactory(prompt=PromptFactory(study=other, word="pilot")), value="female")
    choose = rita.get(reverse("reports:overview")).content.decode()
    assert "Choose a study" in choose
    assert f'href="{reverse("reports:overview")}?study=other"' in choose
    gender = rita.get(reverse("reports:overview"), {"study": "gender"}).content.decode()
    assert "<strong>10 of 11 images</strong>" in gender
    assert '<option value="other">Other study</option>' in gender
    assert (
        "<strong>1 of 1 images</strong>"
        in rita.get(reverse("reports:overview"), {"study": "other"}).content.decode()
    )


def test_downloads_without_a_study_among_several_are_a_clear_400(fx, rita):
    StudyFactory(slug="other")
    response = rita.get(reverse("reports:table", args=["filtering", "csv"]))
    assert response.status_code == 400
    assert "Choose a study" in response.content.decode()
    assert (
        rita.get(reverse("reports:table", args=["filtering", "csv"]), {"study": "gender"}).status_code == 200
    )


def test_a_study_whose_protocol_has_no_report_yet_says_so(db, rita, unreported_protocol):
    StudyFactory(name="Shoes", slug="shoes", protocol=unreported_protocol)
    html = rita.get(reverse("reports:overview"), {"study": "shoes"}).content.decode()
    assert f"Studies of protocol &#x27;{unreported_protocol}&#x27; have no report yet" in html
    assert rita.get(reverse("reports:heatmap"), {"study": "shoes"}).status_code == 404
    assert (
        rita.get(reverse("reports:table", args=["filtering", "csv"]), {"study": "shoes"}).status_code == 404
    )
    assert rita.get(reverse("reports:chart", args=["heatmap", "svg"]), {"study": "shoes"}).status_code == 404


def test_a_prompt_page_keeps_to_its_own_study(fx, rita):
    StudyFactory(slug="other")
    assert rita.get(reverse("reports:prompt", args=[fx.lawyer.pk])).status_code == 200
    response = rita.get(reverse("reports:prompt", args=[fx.lawyer.pk]), {"study": "other"})
    assert response.status_code == 400


SLASHED = "openai/clip-vit-large-patch14"


def test_a_detector_named_with_a_slash_works_on_every_report_page(fx, rita):
    for item in fx.items[:4]:
        predict(item, SLASHED, "1", "female")
    detector_url = reverse("reports:detector", args=[SLASHED])
    assert detector_url == "/reports/detectors/openai/clip-vit-large-patch14/"
    overview = rita.get(reverse("reports:overview")).content.decode()
    assert f'href="{detector_url}?study=gender"' in overview  # the nav and the tables link it
    pages = [
        (reverse("reports:overview"), {"detector": SLASHED}),
        (reverse("reports:heatmap"), {"detector": SLASHED}),
        (reverse("reports:heatmap"), {"source": SLASHED}),
        (reverse("reports:prompt", args=[fx.lawyer.pk]), {"detector": SLASHED}),
        (detector_url, {}),
        (detector_url, {"kind": "wrong_gender", "t2i_model": "sdxl"}),
        (reverse("reports:table", args=["confusion", "csv"]), {"detector": SLASHED}),
        (reverse("reports:table", args=["model_bias", "md"]), {"detector": SLASHED}),
        (reverse("reports:chart", args=["histogram", "svg"]), {"source": SLASHED}),
        (reverse("reports:chart_image", args=["model_bias", "svg"]), {"detector": SLASHED}),
    ]
    for url, query in pages:
        assert rita.get(url, query).status_code == 200, (url, query)
    page = rita.get(detector_url)
    assert page.context["detector"] == SLASHED
    # Female for items 1-4 (final male, male, female, low quality): 2 wrong genders, 1 false keep.
    assert page.context["confusion"].total == 4
    assert {k["key"]: k["n"] for k in page.context["kinds"]} == {
        "all": 3,
        "false_keep": 1,
        "false_filter": 0,
        "wrong_gender": 2,
    }
    histogram = rita.get(reverse("reports:chart", args=["histogram", "svg"]), {"source": SLASHED})
    assert histogram["Content-Disposition"] == (
        'attachment; filename="biaslab-histogram-openai_clip-vit-large-patch14-gender.svg"'
    )


def test_detector_page_filter_swap_returns_the_whole_results_region(fx, rita):
    html = rita.get(reverse("reports:detector", args=["fake"]), {"t2i_model": "sdxl"}, **HX).content.decode()
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="results"')
    assert '<section id="gallery"' in html
    assert 'hx-boost="true"' in html  # the filter form swaps this region again
