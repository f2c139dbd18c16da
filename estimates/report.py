"""What every protocol's few-label estimate report shares: π over the rounds, its formats, the
chart and one estimand's row figures."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Self

import numpy as np

from estimates import selectors as sel
from estimates.charts import Series, data_uri, series_width_chart_svg
from estimates.estimands import EstimandProtocol, frame_of, series_of
from reports import render
from reports.tables import NO_VALUE, Cell, Column, Table
from studies.models import Study

#: The columns after a report's own keys (model, setting or domain, estimand or attribute).
FIGURES = (
    "estimate",
    "ci95",
    "human_only",
    "human_only_ci95",
    "detector_only",
    "lambda",
    "effective_labels",
    "n_labelled",
    "n_items",
)


#: The table's column headers, as the gender estimate's table writes them (others: capitalised).
LABELS = {
    "t2i_model": "T2I model",
    "ci95": "95 % interval",
    "human_only": "Labels only",
    "human_only_ci95": "Labels-only 95 % interval",
    "lambda": "λ",
    "n_labelled": "Labelled",
    "n_items": "Items",
}
PAIRS = frozenset({"ci95", "human_only_ci95"})


def inclusion(
    frame: sel.Frame, strata: dict[int, Hashable] | None = None
) -> tuple[dict[int, float], set[int], bool]:
    """item id -> π over the complete rounds (1 - Π_k (1 - q_k)), the drawn items, and if it is a census."""
    usable = frame.usable
    if not usable:
        census = bool(frame.items) and all(i.human is not None for i in frame.items)
        ids = {i.item_id for i in frame.items}
        return (dict.fromkeys(ids, 1.0), ids, True) if census else ({}, set(), False)
    key_of = {i.item_id: (i.t2i_model, i.prompt_id, (strata or {}).get(i.item_id)) for i in frame.items}
    not_drawn = dict.fromkeys((i.item_id for i in frame.items), 1.0)
    drawn: set[int] = set()
    for state in usable:
        pool = [p for p in state.pi.values() if 0.0 < p < 1.0]
        pool_pi = max(pool) if pool else 0.0
        by_stratum: dict[Hashable, float] = {}
        if strata is not None:
            for item_id, p in state.pi.items():
                if 0.0 < p < 1.0 and item_id in key_of:
                    key = key_of[item_id]
                    by_stratum[key] = max(by_stratum.get(key, 0.0), p)
        for item_id in not_drawn:
            q = state.pi.get(item_id, 0.0)
            if item_id in drawn and q == 0.0:
                q = by_stratum.get(key_of[item_id], pool_pi)
            not_drawn[item_id] *= 1.0 - q
        drawn |= state.selected
    return {i: 1.0 - p for i, p in not_drawn.items()}, drawn, False


def census_cells(
    p: np.ndarray, sampled: np.ndarray, labelled: np.ndarray, cells: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """π and the sampled items with every fully ``labelled`` cell taken whole (π = 1); new arrays."""
    p, sampled = np.array(p, dtype=float), np.array(sampled, dtype=bool)
    for mask in cells:
        if mask.any() and labelled[mask].all():
            p[mask] = 1.0
            sampled[mask] = True
    return p, sampled


def drawn_arrays(ids: Iterable[int], pi: dict[int, float], drawn: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """π of each of ``ids`` and whether it is sampled (drawn, with π > 0)."""
    ids = [int(i) for i in ids]
    p = np.array([pi.get(i, 0.0) for i in ids], dtype=float)
    return p, np.array([i in drawn for i in ids], dtype=bool) & (p > 0)


def frame_warnings(frame: sel.Frame, census: bool, todo: str = "label its items") -> list[str]:
    """The warnings every protocol's estimate starts with, worded for the state of the study's rounds."""
    warnings = []
    if not frame.usable and not census:
        if not frame.rounds:
            warnings.append(
                f"No complete sampling round yet: draw one (sample_for_labeling) and {todo}; "
                "the estimates are null until then."
            )
        else:  # what the first pending round waits for: labels, settled disputes, or both
            state = frame.pending[0]
            disputed = len(sel.items_disputed(frame.study, state.pending))
            unlabelled = len(state.pending) - disputed
            parts = [f"{unlabelled} item(s) to be labelled"] if unlabelled else []
            if disputed:
                parts.append(
                    f"{disputed} disputed item(s), which have their labels, to be settled by a researcher "
                    "(disputes page)"
                )
            warnings.append(
                f"Round {state.round.number} is drawn and waits for {' and '.join(parts)}; the estimates "
                "are null until then."
            )
    if frame.not_in_frame:
        warnings.append(f"{frame.not_in_frame} item(s) added after the first round are not in this estimate.")
    return warnings


@dataclass(frozen=True)
class Drawn:
    """What a protocol's estimate starts from: the detector version and output kind it reads, the
    sampling frame, the strata, π over the complete rounds, the drawn items and the first warnings."""

    version: str
    kind: str
    frame: sel.Frame
    strata: dict[int, Hashable] | None
    pi: dict[int, float]
    drawn: set[int]
    warnings: list[str]


def drawn_frame(
    spec: EstimandProtocol,
    study: Study,
    detector: str,
    todo: str = "label its items",
) -> Drawn:
    """The start of ``spec``'s estimate of ``detector`` in ``study``; LookupError when the detector
    has no predictions the estimate reads."""
    series = series_of(spec, study, detector)
    if series is None:
        raise LookupError(
            f"detector '{detector}' has no {spec.output_kind} predictions in study '{study.slug}'"
        )
    version, kind = series
    frame = frame_of(spec, study, detector, version)
    strata = None
    if spec.output_codes and any(state.round.design == "stratified" for state in frame.rounds):
        strata = spec.output_codes(study, detector, version)
    pi, drawn, census = inclusion(frame, strata)
    return Drawn(version, kind, frame, strata, pi, drawn, frame_warnings(frame, census, todo))


#: The most headline numbers the chart draws one line each for; beyond it, their mean width.
CHART_LINES = 4


def _width(ci: list[float] | None) -> float | None:
    return None if ci is None else float(ci[1] - ci[0])


def round_history(
    frame: sel.Frame,
    cells_for: Callable[[dict[int, float], set[int]], Any],
    headline: Callable[[Any], dict[str, dict[str, Any]]],
    strata: dict[int, Hashable] | None = None,
) -> tuple[Series, ...]:
    """The chart's lines: per headline number, the interval widths after each complete round."""
    points: dict[str, list[tuple[int, float | None, float | None]]] = {}
    for k in range(1, len(frame.usable) + 1):
        pi, drawn, _ = inclusion(replace(frame, rounds=frame.usable[:k]), strata)
        named = headline(cells_for(pi, drawn))
        for name, est in named.items():
            points.setdefault(name, []).append(
                (len(drawn), _width(est["ci95"]), _width(est["human_only"]["ci95"]))
            )
    if len(points) <= CHART_LINES:
        return tuple(Series(name, tuple(p)) for name, p in points.items())

    def mean(widths: list[float | None]) -> float | None:
        known = [w for w in widths if w is not None]
        return sum(known) / len(known) if known else None

    rows = [[p[k] for p in points.values() if len(p) > k] for k in range(len(frame.usable))]
    merged = [(row[0][0], mean([w for _, w, _ in row]), mean([h for _, _, h in row])) for row in rows]
    return (Series(f"mean of {len(points)} numbers", tuple(merged)),)


def fmt_number(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def fmt_interval(ci: list[float] | None) -> str:
    return "" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def estimand_figures(est: dict[str, Any], counts: dict[str, Any]) -> list[Any]:
    """One estimand's FIGURES, as written in the CSV, Markdown and table rows (``counts``: the
    cell whose n_labelled and n_items they end with)."""
    human = est["human_only"]
    return [
        fmt_number(est["estimate"]),
        fmt_interval(est["ci95"]),
        fmt_number(human["estimate"]),
        fmt_interval(human["ci95"]),
        fmt_number(est["detector_only"]),
        fmt_number(est["lambda"], 2),
        fmt_number(est["effective_labels"], 0),
        counts["n_labelled"],
        counts["n_items"],
    ]


@dataclass(frozen=True)
class EstimateReport:
    study: Study
    detector: str
    version: str
    cells: dict[str, Any]
    rounds: tuple[int, ...]
    warnings: tuple[str, ...] = ()
    pending: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    #: The width-against-labels chart's lines (``round_history``), when asked for.
    history: tuple[Series, ...] = ()

    #: The JSON key of the cells (the protocol's key, where ``bias_report`` puts the same numbers).
    CELLS_KEY: ClassVar[str] = ""
    #: The report's own key columns, before FIGURES.
    KEYS: ClassVar[tuple[str, ...]] = ()
    #: What a round draws: "item(s)", "pair(s)".
    UNIT: ClassVar[str] = "item(s)"
    TABLE_KEY: ClassVar[str] = ""
    CAPTION: ClassVar[str] = ""
    #: The table's title, with ``{detector}`` and ``{version}``.
    TITLE: ClassVar[str] = ""

    @property
    def header(self) -> tuple[str, ...]:
        return (*self.KEYS, *FIGURES)

    def title(self) -> str:
        return self.TITLE.format(detector=self.detector, version=self.version)

    @classmethod
    def headline(cls, cells: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The report's headline numbers by name (the chart's lines)."""
        raise NotImplementedError

    def rows(self) -> list[list[Any]]:
        raise NotImplementedError

    @classmethod
    def of_frame(
        cls,
        start: Drawn,
        cells: dict[str, Any],
        cells_for: Callable[[dict[int, float], set[int]], Any],
        *,
        history: bool = False,
    ) -> Self:
        """The report of ``start``'s series: cells, rounds, warnings, pending rounds and the chart."""
        frame = start.frame
        return cls(
            frame.study,
            frame.detector,
            frame.version,
            cells,
            tuple(s.round.number for s in frame.usable),
            tuple(start.warnings),
            sel.pending_rounds(frame),
            round_history(frame, cells_for, cls.headline, start.strata) if history else (),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            self.CELLS_KEY: self.cells,
            "detector": self.detector,
            "version": self.version,
            "rounds": list(self.rounds),
            "warnings": list(self.warnings),
            "pending": list(self.pending),
        }

    def api_json(self) -> dict[str, Any]:
        return self.as_json()

    def table(self) -> Table:
        return Table(
            key=self.TABLE_KEY,
            title=self.title(),
            caption=self.CAPTION,
            columns=tuple(
                Column(
                    name,
                    LABELS.get(name, name.replace("_", " ").capitalize()),
                    numeric=name in FIGURES,
                    pair=name in PAIRS,
                )
                for name in self.header
            ),
            rows=tuple(tuple(Cell(v, NO_VALUE if v == "" else str(v)) for v in row) for row in self.rows()),
        )

    def csv(self) -> str:
        # The reports' CSV writer: a model name that starts like a formula is neutralised.
        return render.csv_text([self.header, *self.rows()])

    def markdown(self) -> str:
        lines = [
            f"## {self.title()}",
            "",
            "| " + " | ".join(self.header) + " |",
            "|" + "---|" * len(self.header),
        ]
        lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in self.rows()]
        return "\n".join(lines) + "\n"

    def page_context(self) -> dict[str, Any]:
        return {
            "estimate": self,
            "table": self.table(),
            "chart_src": data_uri(svg) if (svg := series_width_chart_svg(self.history)) else None,
            "chart_alt": (
                "Line chart: width of the 95 % interval of "
                + ", ".join(s.name for s in self.history)
                + " against the labels spent after each round, with detector and labels (solid) and "
                "labels alone (dashed)"
            ),
            "pending": list(self.pending),
            "prompt_tables": [],
            "warnings": list(self.warnings),
        }

    def pending_messages(self) -> list[str]:
        return [pending_message(p, self.UNIT) for p in self.pending]


def pending_message(p: dict[str, Any], unit: str = "item(s)") -> str:
    """One pending round (``selectors.pending_rounds``) in words: what its items wait for."""
    waits = []
    if p.get("waiting_for_labels"):
        waits.append(f"{p['waiting_for_labels']} wait for labels")
    if p.get("waiting_for_dispute"):
        waits.append(f"{p['waiting_for_dispute']} are disputed and wait for a researcher to settle them")
    detail = f" ({'; '.join(waits)})" if waits else ""
    return f"Round {p['round']} is pending: {p['pending_images']} selected {unit} without all final labels{detail}."
