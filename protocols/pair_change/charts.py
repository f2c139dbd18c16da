"""Figure 4 of Wang et al. 2024: the word scores of one domain of one model, sorted, one panel
per attribute."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from metrics import pair_change as pc
from reports import charts as base
from reports.charts import svg_id

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

    from protocols.pair_change.report import PairChangeReport

#: One panel: (attribute, x label, [(word, score)] or None when no detector measures it).
Panel = tuple[str, str, list[tuple[str, float]] | None]


def chart_panels(result: PairChangeReport, model: str, domain: str) -> list[Panel]:
    """Figure 4's panels for (model, domain): per attribute [(word, score)], None without a
    source. Gender is the signed word score (male → female minus female → male, over pairs)."""
    panels: list[Panel] = []
    for attribute, key, label in (
        (pc.AGE, "age", "Age score (+ older)"),
        (pc.GENDER, "gender", "Gender score (+ male → female)"),
        (pc.SKIN, "skin", "Skin score (+ lighter)"),
    ):
        if not result.defined(attribute):
            panels.append((attribute, label, None))
            continue
        values = [(w.word, result.word_value(w, key)) for w in result.words(model, domain)]
        panels.append((attribute, label, [(word, value) for word, value in values if value is not None]))
    return panels


def word_score_chart(panels: Sequence[Panel], fmt: str = "svg", *, title: str) -> bytes:
    """The chart as SVG or PNG bytes (``reports.charts.FORMATS``)."""
    return base._draw(fmt, _build, list(panels), title)


def _build(panels: list[Panel], title: str) -> Figure:
    n_words = max((len(words) for _a, _l, words in panels if words), default=0)
    if not n_words:
        return base.empty_figure(6, 1.6, "No measured pair in this domain yet", title)
    # 8 pt text, 0.2 in per word, 2.8 in panels: legible when a page column shrinks the figure.
    fig = base._new_figure(2.8 * len(panels) + 0.9, 1.2 + 0.2 * n_words)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (attribute, label, words) in zip(axes, panels, strict=True):
        ax.set_xlabel(label, fontsize=base.SMALL_PT)
        if words is None:
            ax.set_axis_off()
            ax.text(
                0.5,
                0.5,
                f"no detector measures {attribute}",
                ha="center",
                va="center",
                fontsize=base.SMALL_PT,
                color="#666666",
                transform=ax.transAxes,
                gid=svg_id(attribute, "", prefix="no-source").rstrip("-"),
            )
            continue
        ordered = sorted(words, key=lambda pair: (-pair[1], pair[0]))
        ys = list(range(len(ordered)))
        for y, (word, value) in zip(ys, ordered, strict=True):
            [bar] = ax.barh(
                [y], [value], 0.75, color=base.MALE_COLOUR if value >= 0 else base.FEMALE_COLOUR, linewidth=0
            )
            bar.set_gid(svg_id(attribute, word))
        largest = max((abs(v) for _w, v in ordered), default=0.0)
        limit = max(1.0, largest * 1.1)
        ax.set_xlim(-limit, limit)
        ax.axvline(0, color="#333333", lw=0.7)
        ax.set_yticks(ys, [word for word, _v in ordered], fontsize=base.SMALL_PT)
        ax.set_ylim(len(ordered) - 0.5, -0.5)
        ax.grid(axis="x", lw=0.4, alpha=0.5)
        ax.set_axisbelow(True)
        ax.tick_params(axis="x", labelsize=base.SMALL_PT)
    fig.suptitle(title, fontsize=10)
    return fig
