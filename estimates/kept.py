"""A computed estimate report kept as plain JSON (never unpickled) and read back as a ``Report``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from reports.tables import Cell, Column, Table


class Report(Protocol):
    """What an estimate report offers the commands, the API and the page."""

    def as_json(self) -> dict[str, Any]: ...

    def api_json(self) -> dict[str, Any]: ...

    def markdown(self) -> str: ...

    def csv(self) -> str: ...

    def pending_messages(self) -> list[str]: ...

    @property
    def version(self) -> str: ...

    def page_context(self) -> dict[str, Any]: ...


#: The chart is an SVG in an ``<img>`` (where SVG runs no script); any other source is dropped.
CHART_PREFIX = "data:image/svg+xml;base64,"
#: Bumped when the shape below changes: an older row is computed again.
SHAPE = 1


def report_to_json(report: Report) -> dict[str, Any]:
    """What is kept of ``report``."""
    page = report.page_context()
    table: Table = page["table"]
    return {
        "shape": SHAPE,
        "version": report.version,
        "as_json": report.as_json(),
        "api_json": report.api_json(),
        "page": {
            "table": {
                "key": table.key,
                "title": table.title,
                "caption": table.caption,
                "columns": [[c.key, c.label, c.numeric, c.pair] for c in table.columns],
                # Each cell's value beside its text (an interval's value is its pair).
                "rows": [[[_value(cell.value), cell.text] for cell in row] for row in table.rows],
            },
            "chart_src": page.get("chart_src"),
            "chart_alt": page.get("chart_alt"),
            "pending": page.get("pending", []),
            "prompt_tables": page.get("prompt_tables", []),
            "warnings": page.get("warnings", []),
        },
    }


def _value(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_value(v) for v in value]
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


def _cell(data: Any) -> Cell:
    value, text = data
    return Cell(tuple(value) if isinstance(value, list) else value, str(text))


@dataclass(frozen=True)
class KeptReport:
    """A report read back from its JSON (``report_to_json``): what the API and the page show of it."""

    data: dict[str, Any]

    @classmethod
    def from_json(cls, data: Any) -> KeptReport | None:
        """The report, or None when ``data`` is not a kept report of this shape."""
        if not isinstance(data, dict) or data.get("shape") != SHAPE:
            return None
        report = cls(data)
        try:
            report.page_context()  # every cell read, every row as long as the columns
            str(data["version"])
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
        return report

    @property
    def version(self) -> str:
        return str(self.data["version"])

    def as_json(self) -> dict[str, Any]:
        return dict(self.data["as_json"])

    def api_json(self) -> dict[str, Any]:
        return dict(self.data["api_json"])

    def page_context(self) -> dict[str, Any]:
        page = self.data["page"]
        t = page["table"]
        chart = page.get("chart_src")
        return {
            "estimate": self,
            "table": Table(
                key=str(t["key"]),
                title=str(t["title"]),
                caption=str(t["caption"]),
                columns=tuple(
                    Column(str(k), str(label), bool(n), bool(p)) for k, label, n, p in t["columns"]
                ),
                rows=tuple(tuple(_cell(cell) for cell in row) for row in t["rows"]),
            ),
            "chart_src": chart if isinstance(chart, str) and chart.startswith(CHART_PREFIX) else None,
            "chart_alt": page.get("chart_alt"),
            "pending": list(page.get("pending") or []),
            "prompt_tables": list(page.get("prompt_tables") or []),
            "warnings": [str(w) for w in page.get("warnings") or []],
        }
