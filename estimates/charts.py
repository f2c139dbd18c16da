"""The estimate page's plot: interval width of the headline numbers against labels spent."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reports import charts as base

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.typing import RcKeyType

RC: dict[RcKeyType, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "svg.hashsalt": "biaslab",
    "svg.fonttype": "path",
    "axes.spines.top": False,
    "axes.spines.right": False,
}


@dataclass(frozen=True)
class Series:
    """One line pair: (labels spent, width with the detector, width with labels alone) per complete round."""

    name: str
    points: tuple[tuple[int, float | None, float | None], ...]


def series_width_chart_svg(series: Sequence[Series]) -> bytes | None:
    """SVG of interval width against labels spent per series; None until a series has two points."""
    drawn = [s for s in series if s.points]
    if not any(len(s.points) >= 2 for s in drawn):
        return None
    import matplotlib
    from matplotlib.lines import Line2D

    nan = float("nan")
    with matplotlib.rc_context(RC):
        fig = base._new_figure(6.0, 3.2)
        ax = fig.add_subplot()
        handles = []
        for index, line in enumerate(drawn):
            colour = base.PALETTE[index % len(base.PALETTE)]
            labels = [p[0] for p in line.points]
            ax.plot(labels, [nan if p[1] is None else p[1] for p in line.points], marker="o", color=colour)
            ax.plot(
                labels,
                [nan if p[2] is None else p[2] for p in line.points],
                marker="s",
                linestyle="--",
                color=colour,
            )
            handles.append(Line2D([], [], color=colour, marker="o", label=line.name))
        handles += [
            Line2D([], [], color="black", label="detector + labels"),
            Line2D([], [], color="black", linestyle="--", label="labels only"),
        ]
        ax.set_xlabel("Labels spent (after each round)")
        ax.set_ylabel("Width of the 95 % interval")
        ax.set_ylim(bottom=0)
        ax.legend(handles=handles, frameon=False)
        return base._save(fig, "svg")


def data_uri(svg: bytes) -> str:
    """An <img> source for the SVG (the page's CSP allows data: images, not inline styles)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")
