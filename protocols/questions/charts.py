"""The questions report's charts: the page's inline-SVG answer shares of one (question, T2I
model), and the SVG / PNG downloads of the shares and the judges' reliability."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reports import charts as base

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

PLOT_LEFT = 120  # room for the answer and judge names
PLOT_WIDTH = 180
WIDTH = PLOT_LEFT + PLOT_WIDTH + 20
FONT = 12  # at the narrowest screen the SVG is drawn at ~0.95 of its size: >= 11 px
BAR_HEIGHT = 14
ROW = 19
GROUP_GAP = 10
TOP = 44  # the title and the tick labels
#: One colour per answer, in the order of the question's choices (repeats past eight).
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
PEOPLE = "people"


@dataclass(frozen=True)
class Bar:
    source: str  # "people" or a judge's detector@version
    group: str
    answer: str
    name: str  # the row's label: the answer's name, or the judge's
    share: float
    lo: float
    hi: float
    n: int
    y: float
    width: float
    lo_x: float
    hi_x: float
    colour: str
    label_y: float
    judge: bool
    mid_y: float


@dataclass(frozen=True)
class SharesChart:
    bars: list[Bar]
    group_labels: list[tuple[str, float, int]]  # (group, y, people's n)
    height: float
    width: float
    ticks: list[tuple[float, str]]
    font: int = FONT
    plot_left: int = PLOT_LEFT


def shares_chart(cell: Mapping[str, Any], choices: Sequence[tuple[str, str]]) -> SharesChart:
    """The chart of one (question, T2I model) cell of the report; ``choices`` are the
    question's (value, display name) in screen order. Judges' bars follow each people's bar."""
    judges = dict(cell.get("judges", {}))
    bars: list[Bar] = []
    labels: list[tuple[str, float, int]] = []
    y = float(TOP)
    for group, g in cell["groups"].items():
        labels.append((group, y + FONT, g["n"]))
        y += ROW + 2
        for position, (value, name) in enumerate(choices):
            colour = PALETTE[position % len(PALETTE)]
            rows = [(PEOPLE, name, g)]
            rows += [
                (judge, judge, j["groups"][group]) for judge, j in judges.items() if group in j["groups"]
            ]
            for source, label, figures in rows:
                share = float(figures["shares"][value])
                lo, hi = (float(v) for v in figures["ci95"][value])
                bars.append(
                    Bar(
                        source=source,
                        group=group,
                        answer=value,
                        name=label,
                        share=share,
                        lo=lo,
                        hi=hi,
                        n=figures["n"],
                        y=y,
                        width=round(share * PLOT_WIDTH, 2),
                        lo_x=round(PLOT_LEFT + lo * PLOT_WIDTH, 2),
                        hi_x=round(PLOT_LEFT + hi * PLOT_WIDTH, 2),
                        colour=colour,
                        label_y=y + BAR_HEIGHT - 2,
                        judge=source != PEOPLE,
                        mid_y=y + BAR_HEIGHT / 2,
                    )
                )
                y += ROW
        y += GROUP_GAP
    ticks = [(PLOT_LEFT + f * PLOT_WIDTH, f"{f:.0%}") for f in (0.0, 0.5, 1.0)]
    return SharesChart(bars=bars, group_labels=labels, height=y + 6, width=WIDTH, ticks=ticks)


def shares_figure(
    report: Mapping[str, Any], questions: Sequence[tuple[str, Sequence[tuple[str, str]]]], fmt: str
) -> bytes:
    """Every (question, T2I model) cell: per group and answer the people's share and each
    judge's, with 95 % Wilson intervals. ``questions``: (key, choices) in screen order."""
    return base._draw(fmt, _build_shares, report, questions)


def _build_shares(
    report: Mapping[str, Any], questions: Sequence[tuple[str, Sequence[tuple[str, str]]]]
) -> Figure:
    panels = [
        (key, choices, model, cell)
        for key, choices in questions
        for model, cell in report["questions"].get(key, {}).items()
    ]
    if not panels:
        return base.empty_figure(5, 1.6, "No final answer yet")
    heights = [
        0.8 + 0.16 * len(cell["groups"]) * len(choices) * (1 + len(cell.get("judges", {})))
        for _, choices, _, cell in panels
    ]
    fig = base._new_figure(6.5, sum(heights) + 0.4)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights)
    for ax, (key, choices, model, cell) in zip(axes[:, 0], panels, strict=True):
        sources: list[tuple[str, Mapping[str, Any]]] = [(PEOPLE, cell), *cell.get("judges", {}).items()]
        y = 0.0
        ticks: list[float] = []
        names: list[str] = []
        for group, _ in cell["groups"].items():
            for position, (value, name) in enumerate(choices):
                colour = PALETTE[position % len(PALETTE)]
                for s, (source, figures) in enumerate(sources):
                    g = figures["groups"].get(group)
                    if g is not None:
                        share = g["shares"][value]
                        lo, hi = g["ci95"][value]
                        ax.barh([y], [share], 0.8, color=colour, alpha=1.0 if s == 0 else 0.45, linewidth=0)
                        ax.errorbar(
                            [share],
                            [y],
                            xerr=[[max(0.0, share - lo)], [max(0.0, hi - share)]],
                            fmt="none",
                            ecolor="#222",
                            lw=0.8,
                        )
                    ticks.append(y)
                    who = "people" if s == 0 else source
                    names.append(f"{group} · {name} · {who}" + (f" (n={g['n']})" if g else ""))
                    y += 1
            y += 0.6
        ax.set_yticks(ticks, names, fontsize=base.SMALL_PT)
        ax.set_ylim(y - 0.4, -0.8)
        ax.set_xlim(0, 1)
        ax.grid(axis="x", lw=0.4, alpha=0.5)
        ax.set_axisbelow(True)
        ax.set_title(f"{key} — {model}", fontsize=10, fontweight="bold")
        ax.set_xlabel("share (95 % Wilson interval); light bars: judges", fontsize=base.SMALL_PT)
    return fig


def reliability_figure(report: Mapping[str, Any], fmt: str) -> bytes:
    """Each judge's reliability diagram per question (items with probabilities): accuracy per
    bin of the top answer's probability, the diagonal being a perfectly calibrated judge."""
    return base._draw(fmt, _build_reliability, report)


def _build_reliability(report: Mapping[str, Any]) -> Figure:
    panels = [
        (name, key, d)
        for name, by_question in report.get("judges", {}).items()
        for key, d in by_question.items()
        if d.get("reliability")
    ]
    if not panels:
        return base.empty_figure(5, 1.6, "No judge gave probabilities yet")
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig = base._new_figure(2.4 * columns + 0.4, 2.5 * rows + 0.3)
    axes = fig.subplots(rows, columns, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.set_axis_off()
            continue
        name, key, d = panels[index]
        filled = [b for b in d["reliability"] if b["n"]]
        ax.bar(
            [b["lo"] for b in filled],
            [b["accuracy"] for b in filled],
            width=0.1,
            align="edge",
            color=base.PALETTE[0],
            edgecolor="white",
            linewidth=0.5,
        )
        ax.plot(
            [b["confidence"] for b in filled],
            [b["accuracy"] for b in filled],
            "o",
            color="#222",
            markersize=3,
        )
        ax.plot([0, 1], [0, 1], "--", color="#777", lw=0.8)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_title(f"{name}\n{key}: ECE {d['ece']:.3f}, n={d['n_probabilities']}", fontsize=8)
        ax.set_xlabel("confidence", fontsize=base.SMALL_PT)
        ax.set_ylabel("accuracy", fontsize=base.SMALL_PT)
        ax.tick_params(labelsize=base.SMALL_PT)
    return fig
