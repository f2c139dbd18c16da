"""The answer-shares chart, drawn as inline SVG geometry (no image request, no matplotlib):
per group a bar for each answer's share with its 95 % Wilson interval as a whisker; each bar
links to the images behind it. Pure: plain numbers in, plain numbers out; the template draws."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PLOT_LEFT = 150  # room for the group and answer names
PLOT_WIDTH = 360
BAR_HEIGHT = 14
BAR_GAP = 4
GROUP_GAP = 14
#: One colour per answer, in the order of the question's choices (repeats past eight).
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")


@dataclass(frozen=True)
class Bar:
    group: str
    answer: str
    name: str
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


@dataclass(frozen=True)
class SharesChart:
    bars: list[Bar]
    group_labels: list[tuple[str, float, int]]  # (group, y, n)
    height: float
    width: float
    ticks: list[tuple[float, str]]


def shares_chart(cell: Mapping[str, Any], choices: Sequence[tuple[str, str]]) -> SharesChart:
    """The chart of one (question, T2I model) cell of the report; ``choices`` are the
    question's (value, display name) in screen order."""
    bars: list[Bar] = []
    labels: list[tuple[str, float, int]] = []
    y = 20.0
    for group, g in cell["groups"].items():
        labels.append((group, y + BAR_HEIGHT - 3, g["n"]))
        y += BAR_HEIGHT + BAR_GAP
        for position, (value, name) in enumerate(choices):
            share = float(g["shares"][value])
            lo, hi = (float(v) for v in g["ci95"][value])
            bars.append(
                Bar(
                    group=group,
                    answer=value,
                    name=name,
                    share=share,
                    lo=lo,
                    hi=hi,
                    n=g["n"],
                    y=y,
                    width=round(share * PLOT_WIDTH, 2),
                    lo_x=round(PLOT_LEFT + lo * PLOT_WIDTH, 2),
                    hi_x=round(PLOT_LEFT + hi * PLOT_WIDTH, 2),
                    colour=PALETTE[position % len(PALETTE)],
                    label_y=y + BAR_HEIGHT - 3,
                )
            )
            y += BAR_HEIGHT + BAR_GAP
        y += GROUP_GAP
    ticks = [(PLOT_LEFT + f * PLOT_WIDTH, f"{f:.0%}") for f in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return SharesChart(
        bars=bars, group_labels=labels, height=y + 10, width=PLOT_LEFT + PLOT_WIDTH + 30, ticks=ticks
    )
