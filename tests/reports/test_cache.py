"""The dashboard caches reports, grids and charts under a data fingerprint: a repeated view costs
no report, and any write (final label, prediction, label, image) shows on the next request."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from annotate.models import Label
from annotate.services import final_label_set
from protocols.gender import report as report_module
from reports import selectors as sel
from tests.factories import ItemFactory, question_of
from tests.reports import dashboard_data
from tests.reports.dashboard_data import predict

pytestmark = pytest.mark.django_db


@pytest.fixture
def report_calls(monkeypatch) -> list[int]:
    """Counts the gender reports actually computed (the bootstrap value of each call)."""
    calls: list[int] = []
    real = report_module.compute

    def counting(scope, **kwargs):
        calls.append(kwargs.get("bootstrap", 1000))
        return real(scope, **kwargs)

    monkeypatch.setattr(report_module, "compute", counting)
    return calls


def _human_sdxl_score(rita) -> float:
    rows = list(
        csv.DictReader(
            io.StringIO(rita.get(reverse("reports:table", args=["model_bias", "csv"])).content.decode())
        )
    )
    return float(rows[0]["sdxl_score"])


def test_a_repeated_overview_computes_the_report_once(fx, rita, report_calls):
    for _ in range(2):
        assert rita.get(reverse("reports:overview")).status_code == 200
    assert report_calls == [1000]


def test_pages_without_intervals_reuse_the_cached_report_with_intervals(fx, rita, report_calls):
    rita.get(reverse("reports:overview"))
    rita.get(reverse("reports:heatmap"))
    rita.get(reverse("reports:table", args=["filtering", "csv"]))
    assert report_calls == [1000]


def test_filters_are_cached_apart(fx, rita, report_calls):
    rita.get(reverse("reports:overview"))
    html = rita.get(reverse("reports:overview"), {"t2i_model": "sd3"}).content.decode()
    assert report_calls == [1000, 1000]
    assert html.count("<tr") < rita.get(reverse("reports:overview")).content.decode().count("<tr")


def test_a_new_final_label_shows_on_the_next_page_view(fx, rita, researcher):
    html = rita.get(reverse("reports:overview")).content.decode()
    assert "<strong>10 of 11 images</strong>" in html
    set_final(fx.items[10], "male", researcher)
    html = rita.get(reverse("reports:overview")).content.decode()
    assert "<strong>11 of 11 images</strong>" in html


def test_a_changed_final_label_changes_the_cached_scores(fx, rita, researcher):
    assert _human_sdxl_score(rita) == pytest.approx(1 / 3)  # sdxl lawyer (2 - 1) / 3
    set_final(fx.items[2], "male", researcher)  # female -> male
    assert _human_sdxl_score(rita) == pytest.approx(1.0)  # sdxl lawyer 3 male of 3


def test_a_new_prediction_shows_on_the_next_page_view(fx, rita):
    def sources() -> list[str]:
        response = rita.get(reverse("reports:table", args=["model_bias", "csv"]))
        return [row["source"] for row in csv.DictReader(io.StringIO(response.content.decode()))]

    rita.get(reverse("reports:overview"))
    assert "newdet" not in sources()
    predict(fx.items[0], "newdet", "1", "male")
    assert "newdet" in sources()


def test_the_inline_chart_is_shown_not_downloaded_and_revalidates(fx, rita, researcher):
    url = reverse("reports:chart_image", args=["model_bias", "svg"])
    response = rita.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    assert "Content-Disposition" not in response
    assert response["Cache-Control"] == "private, no-cache"
    etag = response["ETag"]
    assert rita.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert response.content == rita.get(reverse("reports:chart", args=["model_bias", "svg"])).content
    set_final(fx.items[2], "male", researcher)
    changed = rita.get(url, headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed["ETag"] != etag


def test_the_overview_chart_is_fetched_beside_the_page(fx, rita):
    html = rita.get(reverse("reports:overview")).content.decode()
    src = reverse("reports:chart_image", args=["model_bias", "svg"]) + "?study=gender"
    assert f'<img src="{src}"' in html
    assert rita.get(src).content.startswith(b"<?xml")


def test_the_fingerprint_changes_with_every_kind_of_write(fx, researcher):
    seen = {sel.data_fingerprint()}

    def changed() -> bool:
        fingerprint = sel.data_fingerprint()
        new = fingerprint not in seen
        seen.add(fingerprint)
        return new

    assert not changed()
    set_final(fx.items[2], "male", researcher)
    assert changed()
    predict(fx.items[1], "other", "1", "female")
    assert changed()
    label = Label.objects.filter(item=fx.items[0]).first()
    label.value = "female"
    label.save()  # an annotator changing their label in place (updated_at moves)
    assert changed()
    ItemFactory(prompt=fx.lawyer, t2i_model="sdxl")
    assert changed()
    fx.items[3].final_labels.get().delete()
    assert changed()


@pytest.mark.parametrize("t2i_model", [None, "sdxl"])
def test_heatmap_counts_from_the_report_equal_the_drilldown_counts(fx, t2i_model):
    from protocols.gender.analysis import gender_question
    from reports.analyses import analysis_for

    scope = sel.Scope(fx.study, t2i_model=t2i_model)
    counts = analysis_for("gender").compute(scope, bootstrap=0).prompt_counts
    assert counts == dashboard_data.detector_prompt_counts(scope, question=gender_question(fx.study))
    assert ("place", dashboard_data.RND_WORD) in {key[:2] for key in counts}


def set_final(item, value, researcher):
    final_label_set(item=item, question=question_of(item), value=value, decided_by=researcher)


def test_the_fingerprint_changes_when_a_reimport_corrects_an_items_metadata(tmp_path):
    """An item corrected in place (a re-import changes its model name or metadata) keeps the
    counts and highest ids of every table: its audit record is what changes."""
    from studies.ingest import images_import
    from tests.factories import StudyFactory
    from tests.studies.test_ingest_scale import images_folder, manifest, row

    root = images_folder(tmp_path, 2)
    study = StudyFactory(slug="fix")
    images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(2)]), root=root)
    before = sel.data_fingerprint()
    summary = images_import(
        study=study, manifest_path=manifest(tmp_path, [row(0, t2i_model="flux"), row(1)]), root=root
    )
    assert len(summary.updated) == 1
    assert sel.data_fingerprint() != before
