"""Chart functions return valid, deterministic SVG and PNG bytes; matplotlib loads lazily."""

from __future__ import annotations

import io
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from django.conf import settings
from django.urls import reverse
from PIL import Image

from protocols.gender import charts, tables
from protocols.gender.tables import PromptGrid, PromptRow
from reports import charts as chart_base
from reports import tables as base
from studies.models import Prompt
from tests.reports import dashboard_data

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def grid() -> PromptGrid:
    rows = (
        PromptRow(1, "profession", "lawyer", "p1", {("sdxl", "human"): 0.8, ("sdxl", "clip"): 1.0}, {}),
        PromptRow(2, "profession", "nurse", "p2", {("sdxl", "human"): -1.0, ("sdxl", "clip"): None}, {}),
        PromptRow(3, "place", "R&D_lab 100%", "p3", {("sdxl", "human"): None, ("sdxl", "clip"): 0.0}, {}),
    )
    return PromptGrid(rows=rows, columns=(("sdxl", "human"), ("sdxl", "clip")))


@pytest.fixture
def report() -> dict:
    return {
        "human": {"sdxl": {"model_bias_score": 0.75, "ci95": [0.7, 0.8]}},
        "detectors": {
            "clip": {"per_model": {"sdxl": {"model_bias_score": 0.69, "model_bias_score_ci95": [0.6, 0.75]}}}
        },
    }


def _svg_root(data: bytes) -> ET.Element:
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def _png(data: bytes) -> Image.Image:
    assert data.startswith(PNG_MAGIC)
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_heatmap_is_valid_svg_and_png(grid):
    _svg_root(charts.heatmap_chart(grid, "svg"))
    image = _png(charts.heatmap_chart(grid, "png"))
    assert image.width > 600


def test_histogram_is_valid_svg_and_png(grid):
    scores = grid.source_scores("human")
    _svg_root(charts.histogram_chart(scores, "svg"))
    _png(charts.histogram_chart(scores, "png"))


def test_model_bias_chart_is_valid_svg_and_png(report):
    _svg_root(charts.model_bias_chart(report, "svg"))
    _png(charts.model_bias_chart(report, "png"))


def test_model_bias_chart_accepts_an_interval_that_excludes_the_score():
    skewed = {"human": {"sdxl": {"model_bias_score": 1.0, "ci95": [0.8, 0.95]}}, "detectors": {}}
    _svg_root(charts.model_bias_chart(skewed, "svg"))


def test_same_data_gives_the_same_svg_bytes(grid):
    assert charts.heatmap_chart(grid, "svg") == charts.heatmap_chart(grid, "svg")


def test_svg_carries_no_date(report):
    assert b"<dc:date>" not in charts.model_bias_chart(report, "svg")


def test_charts_draw_an_empty_state_instead_of_failing():
    empty = PromptGrid(rows=(), columns=())
    _svg_root(charts.heatmap_chart(empty, "svg"))
    _svg_root(charts.histogram_chart({}, "svg"))
    _svg_root(charts.model_bias_chart({"human": {}, "detectors": {}}, "svg"))


def test_unknown_format_is_refused_by_name(report):
    with pytest.raises(chart_base.UnknownChart, match="'gif'"):
        charts.model_bias_chart(report, "gif")


def test_histogram_bins_round_to_the_nearest_tenth_and_keep_exact_zeros_apart():
    bins = charts.histogram_bins({"sdxl": [1.0, 1.0, -1.0, 0.0, 0.04, 0.55, -0.33]})
    counts = bins["sdxl"]
    assert counts[20] == 2  # +1.0
    assert counts[0] == 1  # -1.0
    assert counts[10] == 1  # 0.04 rounds into the 0 bin, the exact zero is kept apart
    assert counts[16] == 1  # 0.55 -> 0.6
    assert counts[7] == 1  # -0.33 -> -0.3
    assert bins["__zero__"] == [1]


def test_diverging_colours_go_from_female_through_white_to_male():
    assert charts.diverging_hex(-1.0) == chart_base.FEMALE_COLOUR
    assert charts.diverging_hex(0.0) == "#ffffff"
    assert charts.diverging_hex(1.0) == chart_base.MALE_COLOUR
    assert charts.diverging_hex(None) == chart_base.NO_SCORE_COLOUR


@pytest.mark.subprocess
def test_importing_the_dashboard_does_not_import_matplotlib():
    code = (
        "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); "
        "django.setup(); import reports.views, reports.charts, reports.urls; "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_grid_values_follow_the_columns(grid):
    assert grid.values()[1] == [-1.0, None]
    table = tables.prompt_scores_table(grid)
    assert [c.key for c in table.columns[:3]] == ["category", "word", "prompt"]  # rows stay joinable
    assert table.rows[2][3].text == base.NO_VALUE


# --- QA fixes: missing scores, unscored models, long model names, categories as imported ---------


def test_model_bias_chart_marks_a_missing_human_score_and_an_empty_detector_with_no_score():
    report = {
        "human": {"sdxl": {"model_bias_score": 0.75, "ci95": [0.7, 0.8]}, "sd3": {}},
        "detectors": {
            "clip": {"per_model": {"sdxl": {"model_bias_score": 0.69, "model_bias_score_ci95": [0.6, 0.75]}}},
            "facey": {"per_model": {}},
        },
    }
    svg = charts.model_bias_chart(report, "svg").decode()
    _svg_root(svg.encode())
    # Missing: sd3 human, sd3 clip, sdxl facey, sd3 facey.
    assert svg.count(f"<!-- {charts.NO_SCORE_TEXT} -->") == 4
    assert svg.count('id="no-score') == 4


def test_model_bias_chart_draws_no_no_score_mark_when_every_bar_has_a_score(report):
    assert "no-score" not in charts.model_bias_chart(report, "svg").decode()


def test_histogram_legend_leaves_out_models_without_a_scored_prompt():
    svg = charts.histogram_chart({"sdxl": [0.5, -1.0], "unscored-model": []}, "svg").decode()
    assert "<!-- sdxl -->" in svg
    assert "unscored-model" not in svg


def test_heatmap_writes_a_long_model_name_on_several_lines():
    long_name = "stabilityai/stable-diffusion-xl-base-1.0"
    lines = charts._wrap_title(long_name).split("\n")
    assert len(lines) > 1
    assert "".join(lines) == long_name  # wrapped, nothing lost
    assert all(len(line) <= charts.GROUP_TITLE_WRAP for line in lines)


def test_heatmap_model_titles_do_not_overlap_when_names_are_wider_than_their_columns():
    """QA: 2 models x (human + 1 detector), names "demo-derived" and "demo-photos", overlapped."""
    import matplotlib

    columns = (
        ("demo-derived", "human"),
        ("demo-derived", "facey"),
        ("demo-photos", "human"),
        ("demo-photos", "facey"),
    )
    row = PromptRow(1, "Clear person", "lawyer", "p", dict.fromkeys(columns, 0.5), {})
    with matplotlib.rc_context(chart_base._RC):
        fig = charts._build_heatmap(PromptGrid(rows=(row,), columns=columns))
        renderer = fig.canvas.get_renderer()
        fig.draw(renderer)
        ax = fig.axes[0]
        titles = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
        axes_box = ax.get_window_extent(renderer)
    left, right = titles["demo-derived"], titles["demo-photos"]
    assert left.x1 < right.x0  # side by side with a gap, not overlapping
    column = axes_box.width / len(columns)
    assert left.x1 <= axes_box.x0 + 2 * column  # each title stays over its own two columns
    assert right.x0 >= axes_box.x0 + 2 * column


@pytest.mark.django_db
def test_heatmap_page_shows_category_names_exactly_as_imported(
    study, annotator_a, annotator_b, researcher, client_for
):
    fx = dashboard_data.build(study, annotator_a, annotator_b)
    Prompt.objects.filter(pk=fx.lawyer.pk).update(category="clear Person")
    html = client_for(researcher).get(reverse("reports:heatmap")).content.decode()
    assert ">clear Person</th>" in html
    assert "Clear Person" not in html
    assert '<th class="text cat">clear Person</th>' in html
    # ...and no stylesheet rule re-cases it in the browser.
    css = (settings.BASE_DIR / "static" / "reports" / "reports.css").read_text()
    assert "capitalize" not in css
