"""What every protocol's charts share: formats, style, the figure and its (deterministic) saving."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

FORMATS = {"svg": "image/svg+xml", "png": "image/png"}

# Diverging ColorBrewer PuOr (colour-blind safe): purple female (-1), white balanced, orange male (+1).
FEMALE_COLOUR = "#542788"
MALE_COLOUR = "#b35806"
NO_SCORE_COLOUR = "#d9d9d9"
HUMAN_COLOUR = "#222222"
# Qualitative palette for detectors and T2I models (Okabe-Ito, colour-blind safe).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999", "#000000")
PNG_DPI = 200
# The smallest text of any chart, in points at the saved size (readable in a paper's column).
SMALL_PT = 8
MINUS = "\u2212"  # typographic minus for tick labels

_RC: dict[RcKeyType, Any] = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: identical glyphs on every machine
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "svg.hashsalt": "biaslab",  # fixed ids inside the SVG: same data, same bytes
    "svg.fonttype": "path",
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def svg_id(*parts: str, prefix: str = "bar") -> str:
    """The SVG id of a bar (or mark) of ``parts``: characters outside [A-Za-z0-9_-] become "_"
    (a detector may be named "openai/clip-vit")."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", "-".join((prefix, *parts)))


class UnknownChart(ValueError):
    """A chart name or format that does not exist."""


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def empty_figure(width: float, height: float, message: str, title: str = "", *, axes: bool = False) -> Figure:
    """A figure that only says ``message`` (nothing to draw yet) under ``title``; ``axes``: place it
    in axes coordinates."""
    fig = _new_figure(width, height)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes if axes else ax.transData)
    if title:
        ax.set_title(title)
    return fig


def _save(fig: Figure, fmt: str) -> bytes:
    buffer = io.BytesIO()
    if fmt == "svg":
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    else:
        fig.savefig(buffer, format="png", dpi=PNG_DPI, metadata={"Software": None})
    return buffer.getvalue()


def _draw(fmt: str, build: Any, *args: Any, **kwargs: Any) -> bytes:
    """Run ``build(fig_factory, ...)`` under the fixed style and return the file's bytes."""
    if fmt not in FORMATS:
        raise UnknownChart(f"Unknown chart format {fmt!r}: use one of {', '.join(FORMATS)}.")
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig = build(*args, **kwargs)
        _fit(fig)
        return _save(fig, fmt)


def _fit(fig: Figure, tries: int = 3) -> None:
    """Grow ``fig`` until everything drawn lies inside it (constrained layout clips a wide title)."""
    for _ in range(tries):
        fig.draw_without_rendering()
        tight = fig.get_tightbbox()  # inches
        width, height = fig.get_size_inches()
        over_x = max(0.0, -tight.x0, tight.x1 - width)
        over_y = max(0.0, -tight.y0, tight.y1 - height)
        if over_x < 0.005 and over_y < 0.005:
            return
        # Centred titles overflow on both sides: grow by twice the larger overflow, plus air.
        fig.set_size_inches(
            width + 2 * over_x + (0.1 if over_x else 0), height + 2 * over_y + (0.1 if over_y else 0)
        )
