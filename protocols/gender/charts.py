"""The gender analysis's charts: model bias, prompt heatmap, score histogram."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from protocols.gender.tables import HUMAN, PromptGrid, model_keys
from reports import charts as base

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

CHART_KEYS = ("model_bias", "heatmap", "histogram")


@functools.cache
def _diverging_cmap() -> Any:
    from matplotlib.colors import LinearSegmentedColormap

    # An odd number of levels puts 0 exactly on white.
    colours = [base.FEMALE_COLOUR, "#998ec3", "#ffffff", "#f1a340", base.MALE_COLOUR]
    return LinearSegmentedColormap.from_list("biaslab_gender", colours, N=257)


@functools.cache
def _diverging_hexes() -> tuple[str, ...]:
    """The colormap's levels as #rrggbb, computed once for the thousands of cells of the heatmap page."""
    from matplotlib.colors import to_hex

    cmap = _diverging_cmap()
    return tuple(to_hex(cmap(i)) for i in range(cmap.N))


def diverging_hex(score: float | None) -> str:
    """The heatmap colour of a score as #rrggbb, for HTML cells drawn to match the figure."""
    if score is None:
        return base.NO_SCORE_COLOUR
    hexes = _diverging_hexes()
    # The level matplotlib picks for (score + 1) / 2 in [0, 1]: floor(x * N), the top clipped.
    level = int((max(-1.0, min(1.0, score)) + 1) / 2 * len(hexes))
    return hexes[min(level, len(hexes) - 1)]


def model_bias_chart(report: Mapping[str, Any], fmt: str = "svg") -> bytes:
    """Grouped bars: per T2I model, the human model bias score and every detector's, 95 % CI."""
    return base._draw(fmt, _build_model_bias, report)


def _build_model_bias(report: Mapping[str, Any]) -> Figure:
    from matplotlib.patches import Patch

    models = model_keys(report)
    # A detector's "ci95" is of its % difference; its bars take the score's own interval.
    sources: list[tuple[str, dict[str, Any], str]] = [("Human", report.get("human", {}), "ci95")]
    for det, data in report.get("detectors", {}).items():
        sources.append((det, data.get("per_model", {}), "model_bias_score_ci95"))
    fig = base._new_figure(max(4.5, 1.2 + 0.35 * len(models) * len(sources)), 3.4)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(sources))
    handles = []
    for s_index, (name, per_model, ci_key) in enumerate(sources):
        colour = base.HUMAN_COLOUR if s_index == 0 else base.PALETTE[(s_index - 1) % len(base.PALETTE)]
        xs, ys, lo, hi = [], [], [], []
        for m_index, model in enumerate(models):
            entry = per_model.get(model) or {}
            score = entry.get("model_bias_score")
            x = m_index + (s_index + 0.5) * width - 0.4
            if score is None:  # a grey mark, not a gap: "no data" is not "score 0"
                ax.text(
                    x,
                    0.015,
                    NO_SCORE_TEXT,
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=base.SMALL_PT,
                    color="#666666",
                    gid="no-score",
                )
                continue
            ci = entry.get(ci_key) or [None, None]
            xs.append(x)
            ys.append(score)
            # A percentile interval may miss the point; matplotlib refuses negative errors.
            lo.append(max(0.0, score - ci[0]) if ci[0] is not None else 0.0)
            hi.append(max(0.0, ci[1] - score) if ci[1] is not None else 0.0)
        ax.bar(xs, ys, width * 0.92, color=colour, yerr=[lo, hi], capsize=2, error_kw={"lw": 0.8})
        # Explicit handles: a source with no bar at all would otherwise get a default colour.
        handles.append(Patch(facecolor=colour, label=name))
    ax.set_xticks(range(len(models)), models)
    # Fixed limits: "no score" marks are text, which autoscaling ignores, so an edge one fell off.
    ax.set_xlim(-0.5, max(len(models), 1) - 0.5)
    ax.set_xlabel("T2I model")
    # Two lines: one long line ran past the top of the axes into the title.
    ax.set_ylabel("Model bias score\n(0 = balanced, 1 = one gender)", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.grid(axis="y", lw=0.4, alpha=0.5)
    ax.set_axisbelow(True)
    ax.set_title("Model bias score, human vs detectors (bars: 95 % CI)", pad=8)
    if models:
        ax.legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="Source"
        )
    else:
        ax.text(0.5, 0.5, "No labelled images yet", ha="center", va="center", transform=ax.transAxes)
    return fig


NO_SCORE_TEXT = "no score"
NO_SCORE_STYLE = {"facecolor": base.NO_SCORE_COLOUR, "edgecolor": "#9a9a9a", "hatch": "////"}


def heatmap_chart(grid: PromptGrid, fmt: str = "svg") -> bytes:
    """Prompts (by category) x (T2I model, source), PuOr from female -1 to male +1."""
    return base._draw(fmt, _build_heatmap, grid)


def _build_heatmap(grid: PromptGrid) -> Figure:
    import numpy as np
    from matplotlib.colors import Normalize
    from matplotlib.patches import Patch, Rectangle

    n_rows, n_cols = len(grid.rows), len(grid.columns)
    if not n_rows or not n_cols:
        return base.empty_figure(5, 1.5, "No prompt has a final label yet", axes=True)
    values = np.array(
        [[math.nan if v is None else v for v in row] for row in grid.values()], dtype=float
    ).reshape(n_rows, n_cols)
    annotate = n_cols <= 12 and n_rows <= 120
    blocks = grid.model_blocks()
    cell_w = max(
        0.42 if annotate else 0.3,
        *(_title_width(model) / (last - first + 1) for model, first, last in blocks),
    )
    fig = base._new_figure(_row_label_width(grid) + cell_w * max(n_cols, 3) + 1.5, 1.8 + 0.2 * max(n_rows, 4))
    ax = fig.add_subplot()
    ax.spines[:].set_visible(False)
    cmap = _diverging_cmap().with_extremes(bad=base.NO_SCORE_COLOUR)
    shown = np.ma.masked_invalid(values)
    image = ax.imshow(shown, cmap=cmap, norm=Normalize(-1, 1), aspect="auto", interpolation="nearest")
    for r, c in zip(*np.nonzero(np.isnan(values)), strict=True):
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, lw=0, **NO_SCORE_STYLE))
    for r, c in zip(*np.nonzero(~np.isnan(values)), strict=True) if annotate else ():
        v = values[r, c]
        colour = "white" if abs(v) > 0.6 else "#222"
        ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=base.SMALL_PT, color=colour)
    # Rows: the word, with the category written once beside its block and a rule between blocks.
    ax.set_yticks(range(n_rows), [row.word for row in grid.rows], fontsize=base.SMALL_PT)
    # DejaVu Sans at 8 pt averages about 4.7 pt per character: place categories past the words.
    category_offset = -(max((len(row.word) for row in grid.rows), default=4) * WORD_PT_PER_CHAR + 16)
    start = 0
    for index in range(1, n_rows + 1):
        if index == n_rows or grid.rows[index].category != grid.rows[start].category:
            if index < n_rows:
                ax.axhline(index - 0.5, color="#333", lw=0.9)
            ax.annotate(
                grid.rows[start].category,
                xy=(0, (start + index - 1) / 2),
                xycoords=("axes fraction", "data"),
                xytext=(category_offset, 0),
                textcoords="offset points",
                rotation=90 if index - start >= 4 else 0,
                ha="center" if index - start >= 4 else "right",
                va="center",
                fontsize=8,
                fontweight="bold",
            )
            start = index
    # Columns: the source under each cell, the T2I model once above its block.
    ax.set_xticks(
        range(n_cols), ["Human" if s == HUMAN else s for _, s in grid.columns], rotation=60, ha="right"
    )
    for label, (_model, source) in zip(ax.get_xticklabels(), grid.columns, strict=True):
        if source == HUMAN:
            label.set_fontweight("bold")
    for model, first, last in blocks:
        if first > 0:
            ax.axvline(first - 0.5, color="#333", lw=1.2)
        ax.text(
            (first + last) / 2,
            -0.7,
            _wrap_title(model),
            ha="center",
            va="bottom",
            fontsize=GROUP_TITLE_PT,
            fontweight="bold",
            linespacing=1.1,
        )
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_xlabel("Source of the labels per T2I model: human ground truth or detector")
    # A tall heatmap keeps a colour bar of readable height at the top, not one spanning 100 rows.
    colourbar = fig.colorbar(
        image,
        ax=ax,
        fraction=0.04,
        pad=0.015,
        aspect=20,
        shrink=min(1.0, 30 / max(n_rows, 1)),
        anchor=(0.0, 1.0),
    )
    colourbar.set_label("Prompt bias score")
    colourbar.set_ticks(
        [-1, -0.5, 0, 0.5, 1],
        labels=[f"{base.MINUS}1 all female", f"{base.MINUS}0.5", "0 balanced", "0.5", "+1 all male"],
    )
    # The "no score" key hangs under the colour bar: as an axes legend it pushed the bar aside.
    colourbar.ax.legend(
        handles=[Patch(label="no clear image\n(no score)", **NO_SCORE_STYLE)],
        loc="upper left",
        bbox_to_anchor=(-0.5, -0.04),
        frameon=False,
        handlelength=1.6,
        borderaxespad=0,
    )
    return fig


GROUP_TITLE_PT = 9
GROUP_TITLE_WRAP = 16  # characters per line of a T2I model name above its columns
# DejaVu Sans Bold averages about 0.62 em per character (measured on model-like names).
_BOLD_EM = 0.62
# The mean advance of DejaVu Sans per character of a row label (base.SMALL_PT), in points.
WORD_PT_PER_CHAR = 4.7


def _wrap_title(model: str) -> str:
    """A long model name on several lines, broken at "-", "_", "/" or spaces where it can be."""
    import textwrap

    spaced = model.replace("/", "/ ").replace("_", "_ ")
    lines = textwrap.wrap(spaced, GROUP_TITLE_WRAP, break_on_hyphens=True, break_long_words=True)
    return "\n".join(line.replace("/ ", "/").replace("_ ", "_").strip() for line in lines) or model


def _title_width(model: str) -> float:
    """Inches the wrapped group title needs, plus a little air so neighbours never touch."""
    longest = max(len(line) for line in _wrap_title(model).split("\n"))
    return longest * _BOLD_EM * GROUP_TITLE_PT / 72 + 0.12


def _row_label_width(grid: PromptGrid) -> float:
    """Inches left of the cells: the words plus the category written beside its block."""
    longest_word = max((len(row.word) for row in grid.rows), default=4)
    longest_category = max((len(row.category) for row in grid.rows), default=4)
    return (longest_word * WORD_PT_PER_CHAR + 16 + longest_category * 5.6) / 72 + 0.3


HIST_BINS = tuple(round(-1 + 0.1 * i, 1) for i in range(21))  # bin centres -1.0 … 1.0


def histogram_bins(scores_by_model: Mapping[str, Sequence[float]]) -> dict[str, list[int]]:
    """Counts per bin centre per model, plus ``"__zero__"``: the exact zeros per model."""
    out: dict[str, list[int]] = {}
    zeros = []
    for model, scores in scores_by_model.items():
        counts = [0] * len(HIST_BINS)
        n_zero = 0
        for s in scores:
            if s == 0:
                n_zero += 1
                continue
            index = math.floor((s + 1) * 10 + 0.5 + 1e-9)
            counts[max(0, min(len(HIST_BINS) - 1, index))] += 1
        out[model] = counts
        zeros.append(n_zero)
    out["__zero__"] = zeros
    return out


def histogram_chart(
    scores_by_model: Mapping[str, Sequence[float]], fmt: str = "svg", *, source: str = "Human"
) -> bytes:
    """Paper figure 3: percent of all scored outputs per bin, stacked by T2I model; exact zeros grey."""
    return base._draw(fmt, _build_histogram, scores_by_model, source)


def _build_histogram(scores_by_model: Mapping[str, Sequence[float]], source: str) -> Figure:
    bins = histogram_bins(scores_by_model)
    total = sum(len(s) for s in scores_by_model.values())
    fig = base._new_figure(7.2, 3.8)  # 21 bins whose 8 pt values never touch
    ax = fig.add_subplot()
    bottom = [0.0] * len(HIST_BINS)
    n_drawn = 0
    for m_index, model in enumerate(scores_by_model):
        if not scores_by_model[model]:
            # No legend entry for an empty source; colours follow the model's position across sources.
            continue
        n_drawn += 1
        heights = [100 * c / total if total else 0.0 for c in bins[model]]
        ax.bar(
            HIST_BINS,
            heights,
            0.085,
            bottom=bottom,
            color=base.PALETTE[m_index % len(base.PALETTE)],
            label=model,
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    zero_share = 100 * sum(bins["__zero__"]) / total if total else 0.0
    if zero_share:
        ax.bar(
            [0.0],
            [zero_share],
            0.085,
            bottom=[bottom[10]],
            color="#8c8c8c",
            label="score exactly 0",
        )
        bottom[10] += zero_share
    for x, h in zip(HIST_BINS, bottom, strict=True):
        if h >= 0.05:
            ax.text(x, h + 0.4, f"{h:.1f}", ha="center", va="bottom", fontsize=base.SMALL_PT)
    ax.set_xticks(
        [-1, -0.5, 0, 0.5, 1],
        [f"{base.MINUS}1\nall female", f"{base.MINUS}0.5", "0\nbalanced", "0.5", "1\nall male"],
    )
    ax.set_xlim(-1.1, 1.1)
    if total:
        # Headroom for the value printed above the tallest bar, clear of the title.
        ax.set_ylim(0, max(bottom) * 1.12)
    ax.set_xlabel("Prompt bias score (bins of 0.1)")
    ax.set_ylabel("Outputs (% of all scored prompts)")
    ax.grid(axis="y", lw=0.4, alpha=0.5)
    ax.set_axisbelow(True)
    ax.set_title(
        f"Distribution of prompt bias scores: {source}\nn = {total} (prompt, T2I model) outputs with a score"
    )
    if total:
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.3),
            ncols=n_drawn + (1 if zero_share else 0),
            frameon=False,
            title="T2I model",
        )
    else:
        ax.text(0.5, 0.5, "No prompt has a score yet", ha="center", va="center", transform=ax.transAxes)
    return fig
