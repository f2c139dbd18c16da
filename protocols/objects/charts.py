"""The paper's Figure 2: grouped bars of object instances per class, male beside female, one
panel per T2I model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from metrics.coco_names import coco_class_index
from metrics.objects import GENDERS, PERSON
from reports import charts as base
from reports.charts import svg_id

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

#: Classes per panel: beyond it the least frequent are left out (the paper cut at 9 and 4
#: instances for its two models).
TOP_CLASSES = 30
COLOURS = {"male": base.MALE_COLOUR, "female": base.FEMALE_COLOUR}


def panels(
    report: Mapping[str, Any], *, top: int = TOP_CLASSES
) -> list[tuple[str, list[tuple[str, int, int]], int]]:
    """Per T2I model: the ``top`` [(class, male, female)] without ``person``, most instances
    first, and how many classes there were."""
    out = []
    for model, entry in report.get("objects", {}).items():
        counts = entry.get("counts", {})
        rows = [
            (name, int(c.get("male", 0)), int(c.get("female", 0)))
            for name, c in counts.items()
            if name != PERSON and c.get("male", 0) + c.get("female", 0) > 0
        ]
        rows.sort(key=lambda r: (-(r[1] + r[2]), coco_class_index(r[0])))
        out.append((model, rows[:top], len(rows)))
    return out


def counts_chart(report: Mapping[str, Any], fmt: str = "svg") -> bytes:
    """The grouped bar chart (Figure 2) as SVG or PNG bytes (``reports.charts.FORMATS``)."""
    return base._draw(fmt, _build, panels(report), str(report.get("detector", "")))


def _build(data: list[tuple[str, list[tuple[str, int, int]], int]], detector: str) -> Figure:
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    title = "Object instances per class by prompt gender (person left out)"
    if not data or not any(rows for _, rows, _ in data):
        return base.empty_figure(5.5, 1.8, "No object other than person was found yet", title)
    widest = max(len(rows) for _, rows, _ in data)
    fig = base._new_figure(max(5.5, 1.2 + 0.32 * widest), 0.6 + 2.7 * len(data))
    axes = fig.subplots(len(data), 1, squeeze=False)
    for (model, rows, n_classes), [ax] in zip(data, axes, strict=True):
        xs = list(range(len(rows)))
        for g_index, gender in enumerate(GENDERS):
            offset = -0.2 if g_index == 0 else 0.2
            values = [r[1 + g_index] for r in rows]
            bars = ax.bar([x + offset for x in xs], values, 0.4, color=COLOURS[gender], linewidth=0)
            for bar, row in zip(bars, rows, strict=True):
                bar.set_gid(svg_id(model, gender, row[0]))
        ax.set_xticks(xs, [r[0] for r in rows], rotation=60, ha="right")
        ax.set_xlim(-0.6, max(widest, 4) - 0.4)  # one bar width on every panel
        ax.set_ylabel("Instances")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(axis="y", lw=0.4, alpha=0.5)
        ax.set_axisbelow(True)
        cut = f", the {len(rows)} most frequent of {n_classes} classes" if n_classes > len(rows) else ""
        ax.set_title(f"{model}{cut}", fontsize=9, fontweight="bold", loc="left")
        if not rows:
            ax.text(0.5, 0.5, "no object other than person", ha="center", va="center", transform=ax.transAxes)
    suffix = f" — {detector}" if detector else ""
    fig.suptitle(title + suffix, fontsize=10)
    fig.legend(
        handles=[Patch(facecolor=COLOURS[g], label=f"{g} prompts") for g in GENDERS],
        loc="outside lower center",
        ncols=2,
        frameon=False,
        fontsize=8,
    )
    return fig
