"""The GEP vector chart: diverging bars per attribute, the human vector beside each
detector's, one row of panels per T2I model of one setting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from metrics import gep_design
from reports import charts as base
from reports.charts import svg_id

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

HUMAN = "human"
WOMAN_COLOUR = base.FEMALE_COLOUR
MAN_COLOUR = base.MALE_COLOUR
UnknownChart = base.UnknownChart


def vector_panels(
    report: Mapping[str, Any], *, setting: str, models: Sequence[str] | None = None
) -> list[tuple[str, list[tuple[str, Mapping[str, float | None], float | None]]]]:
    """Per T2I model with items in ``setting`` (all, or ``models``): [(source, vector, GEP
    score)], the human first, then each detector, then each judge."""
    panels = []
    for model, by_setting in report.get("attributes", {}).items():
        if models is not None and model not in models:
            continue
        cell = by_setting.get(setting)
        if cell is None:
            continue
        sources = [(HUMAN, cell["gep_vector"], cell["gep_score"])]
        sources += [(name, d["gep_vector"], d["gep_score"]) for name, d in cell["detectors"].items()]
        sources += [(name, j["gep_vector"], j["gep_score"]) for name, j in cell.get("judges", {}).items()]
        panels.append((model, sources))
    return panels


def gep_vector_chart(
    report: Mapping[str, Any],
    fmt: str = "svg",
    *,
    setting: str,
    keys: Sequence[str],
) -> bytes:
    """The chart of ``setting`` as SVG or PNG bytes (``reports.charts.FORMATS``)."""
    if setting not in gep_design.SETTINGS:
        raise UnknownChart(f"Unknown setting {setting!r}: use one of {', '.join(gep_design.SETTINGS)}.")
    return base._draw(fmt, _build, vector_panels(report, setting=setting), setting, tuple(keys))


def _limit(values: Sequence[float | None]) -> float:
    """Half-width of a panel's x axis: the largest |v| with some air, never 0."""
    largest = max((abs(v) for v in values if v is not None), default=0.0)
    return largest * 1.15 if largest > 0 else 1.0


def _build(
    panels: list[tuple[str, list[tuple[str, Mapping[str, float | None], float | None]]]],
    setting: str,
    keys: tuple[str, ...],
) -> Figure:
    from matplotlib.patches import Patch

    title = f"GEP vectors, {setting} setting"
    if not panels or not keys:
        return base.empty_figure(5, 1.6, f"No item of the {setting} setting yet", title)
    n_cols = max(len(sources) for _, sources in panels)
    n_rows = len(panels)
    # At least 6 inches wide: a human panel alone must still fit the title above it.
    fig = base._new_figure(max(6.0, 1.3 + 2.5 * n_cols), 0.9 + n_rows * (0.7 + 0.21 * len(keys)))
    axes = fig.subplots(n_rows, n_cols, squeeze=False, sharey=True)
    ys = list(range(len(keys)))
    for r, (model, sources) in enumerate(panels):
        for c in range(n_cols):
            ax = axes[r][c]
            if c >= len(sources):
                ax.set_axis_off()
                continue
            source, vector, score = sources[c]
            values = [vector.get(key) for key in keys]
            frequencies = source == HUMAN or "@" in source  # the human's and a judge's answers
            limit = 1.0 if frequencies else _limit(values)
            for y, key, value in zip(ys, keys, values, strict=True):
                if value is None:
                    ax.text(
                        0,
                        y,
                        "n/a",
                        ha="center",
                        va="center",
                        fontsize=base.SMALL_PT,
                        color="#777777",
                        # A white box keeps the mark readable over the zero line.
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"},
                        gid=svg_id(source, key, prefix="no-value"),
                    )
                    continue
                [bar] = ax.barh(
                    [y], [value], 0.7, color=WOMAN_COLOUR if value >= 0 else MAN_COLOUR, linewidth=0
                )
                bar.set_gid(svg_id(source, key))
            ax.axvline(0, color="#333333", lw=0.7)
            ax.set_xlim(-limit, limit)
            if frequencies:
                ax.set_xticks([-1, -0.5, 0, 0.5, 1])
            ax.set_ylim(len(keys) - 0.5, -0.5)
            ax.grid(axis="x", lw=0.4, alpha=0.5)
            ax.set_axisbelow(True)
            ax.tick_params(axis="x", labelsize=base.SMALL_PT)
            name = "Human" if source == HUMAN else source
            score_text = "\u2013" if score is None else f"{score:.3g}"
            ax.set_title(
                f"{name}\nGEP {score_text}", fontsize=8, fontweight="bold" if source == HUMAN else None
            )
            if r == n_rows - 1:
                ax.set_xlabel(
                    "f_woman \u2212 f_man" if frequencies else "mean score: woman \u2212 man",
                    fontsize=base.SMALL_PT,
                )
            if c == 0:
                ax.set_yticks(ys, list(keys), fontsize=base.SMALL_PT)
                ax.set_ylabel(model, fontsize=8, fontweight="bold")
    fig.suptitle(f"{title} (human beside each detector)", fontsize=10)
    fig.legend(
        handles=[
            Patch(facecolor=WOMAN_COLOUR, label="more with women"),
            Patch(facecolor=MAN_COLOUR, label="more with men"),
        ],
        loc="outside lower center",
        ncols=2,
        frameon=False,
        fontsize=base.SMALL_PT,
    )
    return fig
