"""The one table model of every report: a ``Table`` of ``Column``s and rows of ``Cell``s (pure)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# Shown where there is no number (no clear image, detector gave no prediction): an en dash.
NO_VALUE = "\u2013"


class UnknownTable(ValueError):
    """A download asked for a table name that does not exist."""


@dataclass(frozen=True)
class Cell:
    """One table cell: ``value`` goes to CSV, ``text`` to the rest; ``mark`` best/worst, ``title`` a note."""

    value: Any
    text: str
    mark: str = ""
    title: str = ""
    sort: float | None = None


@dataclass(frozen=True)
class Column:
    key: str  # CSV header
    label: str  # HTML / LaTeX / Markdown header
    numeric: bool = True
    # A (low, high) interval: one cell on the page, two CSV columns <key>_lo and <key>_hi.
    pair: bool = False


@dataclass(frozen=True)
class Table:
    """A titled table: columns, rows of cells, optional column groups and notes."""

    key: str
    title: str
    caption: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    groups: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(
                    f"Table {self.key!r}: a row has {len(row)} cells for {len(self.columns)} columns."
                )

    @property
    def is_empty(self) -> bool:
        return not self.rows

    @property
    def display_rows(self) -> list[list[tuple[Cell, Column]]]:
        """Rows as (cell, column) pairs, so templates can align text left and numbers right."""
        return [list(zip(row, self.columns, strict=True)) for row in self.rows]

    @classmethod
    def of(
        cls,
        key: str,
        title: str,
        caption: str,
        fields: Sequence[Field],
        records: Iterable[Any],
        **extra: Any,
    ) -> Table:
        """A table declared as fields (a column and how it reads its cell from one record)."""
        columns = tuple(column for column, _ in fields)
        rows = tuple(tuple(read(record) for _, read in fields) for record in records)
        return cls(key, title, caption, columns, rows, **extra)

    def column_group(self, index: int) -> str:
        """The group label over column ``index`` ("" when none)."""
        start = 0
        for label, span in self.groups:
            if start <= index < start + span:
                return label
            start += span
        return ""


#: A column and how it reads its cell from one record (``Table.of``).
Field = tuple[Column, Callable[[Any], Cell]]
Get = str | int | tuple[str | int, ...] | Callable[[Any], Any] | None


def _reader(get: Get, key: str) -> Callable[[Any], Any]:
    """``get`` when callable; else the record's item or attribute ``get`` (a tuple: a path; default:
    the key; None once a step finds nothing)."""
    if callable(get):
        return get
    path = get if isinstance(get, tuple) else (key if get is None else get,)

    def read(record: Any) -> Any:
        for name in path:
            if record is None:
                return None
            if isinstance(record, Mapping):
                record = record.get(name)
            else:
                record = record[int(name)] if isinstance(record, tuple) else getattr(record, str(name))
        return record

    return read


def value_field(
    key: str,
    label: str,
    cell: Callable[[Any], Cell],
    get: Get = None,
    *,
    numeric: bool = True,
    pair: bool = False,
) -> Field:
    """A column whose cell is ``cell`` of the value ``get`` reads from the record."""
    read = _reader(get, key)
    return Column(key, label, numeric=numeric, pair=pair), lambda record: cell(read(record))


def cell_field(key: str, label: str, cell: Callable[[Any], Cell], *, pair: bool = False) -> Field:
    """A column whose cell is ``cell`` of the whole record."""
    return Column(key, label, pair=pair), cell


def text_field(key: str, label: str, get: Get = None) -> Field:
    return value_field(key, label, text_cell, get, numeric=False)


def num_field(key: str, label: str, get: Get = None, digits: int = 3) -> Field:
    return value_field(key, label, lambda value: num_cell(value, digits), get)


def ci_field(key: str, label: str, get: Get = None, digits: int = 2) -> Field:
    return value_field(key, label, lambda value: ci_cell(value, digits), get, pair=True)


def int_field(key: str, label: str, get: Get = None) -> Field:
    return value_field(key, label, int_cell, get)


def raw_cell(value: Any) -> Cell:
    return Cell(value, NO_VALUE if value is None else str(value))


def raw_table(key: str, keys: Sequence[str], records: Iterable[Mapping[str, Any]], title: str = "") -> Table:
    """A CSV-only table: each record's value of ``keys`` as it is (a key ending in ``ci95``: an
    interval, two columns)."""
    fields = [
        value_field(k, k, raw_cell)
        if not k.endswith("ci95")
        else value_field(k, k, lambda v: Cell((v[0], v[1]) if v else (None, None), ""), pair=True)
        for k in keys
    ]
    return Table.of(key, title, "", fields, records)


# --- formatting ---------------------------------------------------------------------------------


def num(value: float | None, digits: int = 3) -> str:
    """A number with ``digits`` decimals, or the en dash for None / NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NO_VALUE
    return f"{value:.{digits}f}"


def pct(fraction: float | None, digits: int = 2) -> str:
    """A ratio in [0, 1] shown as a percentage, the way the paper prints tables 3 and 5."""
    if fraction is None:
        return NO_VALUE
    return f"{100 * fraction:.{digits}f}"


def signed_pct(value: float | None) -> str:
    """A signed percentage difference with the paper's arrow: ↑ over-, ↓ underestimate."""
    if value is None:
        return NO_VALUE
    arrow = "↑" if value > 0 else "↓" if value < 0 else ""
    return f"{value:+.2f} % {arrow}".strip()


def text_cell(value: Any) -> Cell:
    return Cell(value=value, text=str(value))


def num_cell(value: float | None, digits: int = 3, title: str = "") -> Cell:
    return Cell(value=value, text=num(value, digits), title=title)


def int_cell(value: int | None) -> Cell:
    return Cell(value=value, text=NO_VALUE if value is None else f"{value:,}")


def ci_cell(ci: Sequence[float | None] | None, digits: int = 2) -> Cell:
    """An interval cell for a ``pair`` column: the value is (lo, hi), (None, None) when absent."""
    if not ci or ci[0] is None or ci[1] is None:
        return Cell((None, None), NO_VALUE)
    return Cell((ci[0], ci[1]), f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]")


def mark_extremes(table: Table, key: str, by: Iterable[float | None], first: int = 0) -> Table:
    """``table`` with, in column ``key`` from row ``first`` on, the cell of the smallest |by| marked
    best and of the largest worst (paper tables 1 and 2), unless tied."""
    scored = [(abs(v), i) for i, v in enumerate(by) if v is not None]
    if len(scored) < 2 or min(scored)[1] == max(scored)[1]:
        return table
    column = [c.key for c in table.columns].index(key)
    rows = [list(row) for row in table.rows]
    for index, mark in ((min(scored)[1], "best"), (max(scored)[1], "worst")):
        rows[first + index][column] = replace(rows[first + index][column], mark=mark)
    return replace(table, rows=tuple(tuple(row) for row in rows))
