"""The estimate page's plot: width of the 95 % interval of the model bias score against the
labels spent, round by round, for the prediction-powered estimate and the human labels alone.

matplotlib is imported inside the function (Django start-up and tests that draw nothing stay
light), on a bare ``Figure`` with the Agg canvas (no pyplot state), with fixed SVG ids and no
date, so the same data gives the same bytes.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from estimates.selectors import ModelEstimate

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.typing import RcKeyType

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00")
RC: dict[RcKeyType, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "svg.hashsalt": "biaslab",
    "svg.fonttype": "path",
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def width_chart_svg(models: Sequence[ModelEstimate]) -> bytes | None:
    """SVG of interval width (y) against labels spent (x) per T2I model; solid lines for the
    prediction-powered interval, dashed for the human-only one. None when no model has a
    complete round."""
    if not any(m.history for m in models):
        return None
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(6.0, 3.2), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for index, model in enumerate(m for m in models if m.history):
            colour = PALETTE[index % len(PALETTE)]
            labels = [p.labels for p in model.history]
            ppi_width = [p.width if p.width is not None else float("nan") for p in model.history]
            human = [p.width_human if p.width_human is not None else float("nan") for p in model.history]
            ax.plot(
                labels, ppi_width, marker="o", color=colour, label=f"{model.t2i_model}: detector + labels"
            )
            ax.plot(
                labels,
                human,
                marker="s",
                linestyle="--",
                color=colour,
                label=f"{model.t2i_model}: labels only",
            )
        ax.set_xlabel("Labels spent (after each round)")
        ax.set_ylabel("Width of the 95 % interval")
        ax.set_ylim(bottom=0)
        ax.legend(frameon=False)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return buffer.getvalue()


def data_uri(svg: bytes) -> str:
    """An <img> source for the SVG (the page's CSP allows data: images, not inline styles)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")
