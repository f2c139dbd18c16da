"""Every chart a researcher downloads keeps its text legible and whole: at the size it
is saved (PNG at ``charts.PNG_DPI``, SVG at the same inches) no text is smaller than 8 pt, and no
text (a title, a tick label, a legend) reaches outside the figure, where it would be clipped on
the page and in the download.

The figures are the ones the download views save: ``reports.charts._save`` is wrapped to lay
each figure out as saved and measure every text drawn, then save it as before."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from protocols.gender import charts as gender_charts
from reports import charts
from tests.reports import attributes_data, dashboard_data, pair_change_data
from tests.reports.test_objects_report import build as objects_build

pytestmark = pytest.mark.django_db

MIN_POINTS = 8.0
# Half a pixel at the PNG's resolution: rounding, not a clipped glyph.
SLACK_INCHES = 0.5 / charts.PNG_DPI


def _measure(fig: Any) -> dict[str, Any]:
    """Every drawn, non-empty text of ``fig``: its size in points and its box in inches, beside
    the figure's size in inches."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    width, height = fig.get_size_inches()
    unseen = _unseen_tick_labels(fig)
    texts = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or id(text) in unseen:
            continue
        box = text.get_window_extent(renderer)
        texts.append(
            {
                "text": text.get_text(),
                "points": text.get_fontsize(),
                "box": (box.x0 / fig.dpi, box.y0 / fig.dpi, box.x1 / fig.dpi, box.y1 / fig.dpi),
            }
        )
    return {"size": (width, height), "texts": texts}


def _unseen_tick_labels(fig: Any) -> set[int]:
    """The tick labels matplotlib keeps but does not draw: those of ticks outside the axis'
    view (``Axis._update_ticks`` returns the ticks ``Axis.draw`` draws)."""
    unseen: set[int] = set()
    for ax in fig.axes:
        for axis in ax._axis_map.values():
            drawn = {id(label) for tick in axis._update_ticks() for label in (tick.label1, tick.label2)}
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                unseen.update(id(label) for label in (tick.label1, tick.label2) if id(label) not in drawn)
    return unseen


@pytest.fixture
def saved(monkeypatch) -> list[dict[str, Any]]:
    """The measures of every figure saved while the test runs."""
    measured: list[dict[str, Any]] = []
    save = charts._save

    def measuring_save(fig: Any, fmt: str) -> bytes:
        data = save(fig, fmt)
        measured.append(_measure(fig))
        return data

    monkeypatch.setattr(charts, "_save", measuring_save)
    return measured


def _problems(measure: dict[str, Any]) -> list[str]:
    width, height = measure["size"]
    problems = []
    for text in measure["texts"]:
        x0, y0, x1, y1 = text["box"]
        if text["points"] < MIN_POINTS:
            problems.append(f"{text['text']!r} is {text['points']} pt")
        if (
            x0 < -SLACK_INCHES
            or y0 < -SLACK_INCHES
            or x1 > width + SLACK_INCHES
            or y1 > height + SLACK_INCHES
        ):
            problems.append(
                f"{text['text']!r} spans ({x0:.2f}, {y0:.2f})-({x1:.2f}, {y1:.2f}) in, "
                f"outside the {width:.2f} x {height:.2f} in figure"
            )
    return problems


def _download(client: Any, name: str, query: str) -> None:
    for fmt in ("png", "svg"):
        response = client.get(reverse("reports:chart", args=[name, fmt]) + query)
        assert response.status_code == 200, (name, fmt, response.content[:200])


def test_the_object_chart_keeps_its_title_inside_the_figure_at_8_points_or_more(rita, saved):
    objects_build()
    _download(rita, "counts", "?study=cooccur")
    assert saved
    assert [p for m in saved for p in _problems(m)] == []


def test_the_pair_word_score_chart_has_no_text_under_8_points(rita, saved):
    pair_change_data.build(slug="bp")
    for query in ("?study=bp", "?study=bp&t2i_model=sd15&category=profession", "?study=bp&t2i_model=p2p"):
        _download(rita, "word_scores", query)
    assert saved
    assert [p for m in saved for p in _problems(m)] == []


def test_the_gender_charts_have_no_text_under_8_points_or_outside(
    rita, saved, study, annotator_a, annotator_b
):
    dashboard_data.build(study, annotator_a, annotator_b)
    for name in gender_charts.CHART_KEYS:
        _download(rita, name, f"?study={study.slug}")
    assert len(saved) == 2 * len(gender_charts.CHART_KEYS)
    assert [p for m in saved for p in _problems(m)] == []


def test_the_gep_charts_have_no_text_under_8_points_or_outside(
    rita, saved, annotator_a, annotator_b, annotator_c
):
    attributes_data.build(attributes_data.attributes_study(), [annotator_a, annotator_b, annotator_c])
    for name in ("gep_neutral", "gep_explicit"):
        _download(rita, name, "?study=gep")
    assert saved
    assert [p for m in saved for p in _problems(m)] == []


def test_a_title_longer_than_the_figure_widens_the_figure_instead_of_being_clipped(saved):
    report = {
        "detector": "a-very-long-detector-name/yolov8x-oiv7-finetuned-on-coco-2017-train",
        "objects": {"sd21": {"counts": {"tie": {"male": 2, "female": 0}}}},
    }
    from protocols.objects import charts as object_charts

    object_charts.counts_chart(report, "png")
    [measure] = saved
    assert _problems(measure) == []
    titles = [t for t in measure["texts"] if t["text"].startswith("Object instances")]
    assert titles, measure["texts"]


def test_the_measure_sees_a_clipped_title_and_a_small_font():
    """The check itself can fail: a title wider than its figure and a 6 pt label are caught."""
    import matplotlib

    with matplotlib.rc_context(charts._RC):
        fig = charts._new_figure(2, 1)
        ax = fig.add_subplot()
        ax.set_title("a title far wider than a figure two inches wide")
        ax.set_xlabel("tiny", fontsize=6)
        problems = _problems(_measure(fig))
    assert any("outside" in p and "a title" in p for p in problems), problems
    assert any("'tiny' is 6" in p for p in problems), problems
