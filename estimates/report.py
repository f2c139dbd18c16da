"""What every protocol's few-label estimate report shares (``estimates.attributes``,
``estimates.pair_change``): its JSON, CSV, Markdown and page context, and how one estimand's
figures are written in a row. A protocol's report adds its cells' layout (``rows``) and its
table's title and caption."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from reports import render
from reports.tables import Cell, Column, Table
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


def fmt_number(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def fmt_interval(ci: list[float] | None) -> str:
    return "" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def estimand_figures(est: dict[str, Any], *, n_labelled: int, n_items: int) -> list[Any]:
    """One estimand's FIGURES, as written in the CSV, Markdown and table rows."""
    human = est["human_only"]
    return [
        fmt_number(est["estimate"]),
        fmt_interval(est["ci95"]),
        fmt_number(human["estimate"]),
        fmt_interval(human["ci95"]),
        fmt_number(est["detector_only"]),
        fmt_number(est["lambda"], 2),
        fmt_number(est["effective_labels"], 0),
        n_labelled,
        n_items,
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

    #: The JSON key of the cells (the protocol's key, where ``bias_report`` puts the same numbers).
    CELLS_KEY: ClassVar[str] = ""
    #: The report's own key columns, before FIGURES.
    KEYS: ClassVar[tuple[str, ...]] = ()
    #: What a round draws: "item(s)", "pair(s)".
    UNIT: ClassVar[str] = "item(s)"
    TABLE_KEY: ClassVar[str] = ""
    CAPTION: ClassVar[str] = ""

    @property
    def header(self) -> tuple[str, ...]:
        return (*self.KEYS, *FIGURES)

    def title(self) -> str:
        raise NotImplementedError

    def rows(self) -> list[list[Any]]:
        raise NotImplementedError

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
                Column(name, name.replace("_", " "), numeric=name in FIGURES) for name in self.header
            ),
            rows=tuple(tuple(Cell(v, str(v)) for v in row) for row in self.rows()),
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
            "chart_src": None,
            "pending": list(self.pending),
            "prompt_tables": [],
            "warnings": list(self.warnings),
        }

    def pending_messages(self) -> list[str]:
        return [
            f"Round {p['round']} is pending: {p['pending_images']} selected {self.UNIT} without all final labels."
            for p in self.pending
        ]
