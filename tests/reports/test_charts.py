"""Chart functions return valid, deterministic SVG and PNG bytes; matplotlib loads lazily."""

from __future__ import annotations

import io
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from PIL import Image

from reports import charts, tables
from reports.tables import PromptGrid, PromptRow

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
    with pytest.raises(charts.UnknownChart, match="'gif'"):
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
    assert charts.diverging_hex(-1.0) == charts.FEMALE_COLOUR
    assert charts.diverging_hex(0.0) == "#ffffff"
    assert charts.diverging_hex(1.0) == charts.MALE_COLOUR
    assert charts.diverging_hex(None) == charts.NO_SCORE_COLOUR


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
    assert table.rows[2][3].text == tables.NO_VALUE
