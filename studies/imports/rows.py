"""CSV rows with their line numbers, the rows an import refused, and what an import did: shared by
every importer (images, labels, ground truth, predictions)."""

from __future__ import annotations

import csv
import os
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from studies.csvio import TEXT_PREFIX, read_cell
from studies.errors import ImportRejected


@dataclass(frozen=True)
class RejectedRow:
    """One row that was not imported: CSV row number (header = 1), the path given, and why."""

    row: int
    path: str
    reason: str

    def __str__(self) -> str:
        return f"row {self.row} ({self.path or 'no path'}): {self.reason}"


@dataclass(frozen=True)
class ItemUpdate:
    """An existing item a re-import changed: ``changes`` maps each field to its (old, new)."""

    key: str
    changes: dict[str, tuple[Any, Any]]

    def __str__(self) -> str:
        shown = "; ".join(f"{name} {old!r} → {new!r}" for name, (old, new) in self.changes.items())
        return f"{self.key}: {shown}"


@dataclass
class ImportSummary:
    """What an import did (or, in a dry run, would do): accepted, duplicates, rejected rows, and
    the items updated, labels changed and items reopened."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[RejectedRow] = field(default_factory=list)
    skipped: int = 0
    updated: list[ItemUpdate] = field(default_factory=list)
    changed: int = 0
    reopened: list[str] = field(default_factory=list)
    # Image imports: rows whose file was not read again (same path, size and mtime as at import).
    unchanged_files: int = 0
    dry_run: bool = False
    reports: tuple[str, ...] = ()
    rows: int = 0  # CSV rows read

    def lines(self, noun: str = "images") -> list[str]:
        """Human-readable summary, one line each, rejected rows last."""
        would = "would be " if self.dry_run else ""
        out = [f"{would}accepted: {self.accepted} {noun}"]
        if "updated" in self.reports:
            out.append(f"{would}updated: {len(self.updated)} items")
            out.extend(f"  {update}" for update in self.updated)
        if "changed" in self.reports:
            out.append(f"{would}changed: {self.changed} {noun}")
            out.append(f"{would}finals reopened: {len(self.reopened)}")
            out.extend(f"  {key}: agreed final answer removed, back to disputed" for key in self.reopened)
        out.append(f"duplicates (already imported, unchanged): {self.duplicates}")
        if self.unchanged_files:
            # Not "of which": the rows of updated items have unchanged files too.
            out.append(
                f"rows whose file is unchanged since its import (not read again): {self.unchanged_files}"
            )
        if self.skipped:
            out.append(f"skipped (nothing to import): {self.skipped}")
        out.append(f"rejected: {len(self.rejected)}")
        out.extend(f"  {line}" for line in rejected_lines(self.rejected))
        if self.dry_run:
            out.append("dry run: nothing was written")
        return out


#: Rows named in full under one reason; beyond this, the reason is given once with the count.
REJECTED_SHOWN_PER_REASON = 5


def rejected_lines(rejected: list[RejectedRow]) -> list[str]:
    """The rejected rows as lines grouped by reason, in first-seen order; a reason shared by many
    rows gives the count and the first five."""
    by_reason: dict[str, list[RejectedRow]] = {}
    for rejected_row in rejected:
        by_reason.setdefault(rejected_row.reason, []).append(rejected_row)
    lines: list[str] = []
    for reason, rows in by_reason.items():
        if len(rows) <= REJECTED_SHOWN_PER_REASON:
            lines.extend(str(r) for r in rows)
            continue
        first = ", ".join(f"row {r.row} ({r.path or 'no path'})" for r in rows[:REJECTED_SHOWN_PER_REASON])
        lines.append(f"{len(rows)} rows: {reason} — first {REJECTED_SHOWN_PER_REASON}: {first}, …")
    return lines


def csv_rows_stream(
    csv_path: str | os.PathLike[str], *, required: Iterable[str]
) -> tuple[list[str], Generator[tuple[int, dict[str, str]], None, None]]:
    """``(header, rows)`` of a UTF-8 CSV: the header checked now (``ImportRejected`` naming missing
    columns), the rows read lazily as ``(row_number, row)`` with the header as row 1."""
    rows = _csv_rows(csv_path, tuple(required))
    header = next(rows)
    assert isinstance(header, list)
    return header, cast(Generator[tuple[int, dict[str, str]], None, None], rows)


def _csv_rows(
    csv_path: str | os.PathLike[str], required: tuple[str, ...]
) -> Generator[list[str] | tuple[int, dict[str, str]], None, None]:
    """The header, then every row (see ``csv_rows_stream``)."""
    reader: Any = None
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            # Built from csv.reader's lists as csv.DictReader would give them: twice as fast.
            header = [name.strip() for name in next(reader, [])]
            if any("\x00" in name for name in header):
                raise ImportRejected(f"{Path(csv_path).name}: the header row contains a NUL character")
            missing = [name for name in required if name not in header]
            if missing:
                raise ImportRejected(
                    f"{Path(csv_path).name}: missing required column(s): {', '.join(missing)} "
                    f"(found: {', '.join(header) or 'no header'}; required: {', '.join(required)})"
                )
            yield header
            width = len(header)
            number = 1
            for cells in reader:
                if not cells:
                    continue
                number += 1
                if len(cells) > width:
                    yield number, {"__error__": "more cells than header columns"}
                    continue
                if len(cells) < width:
                    cells += [""] * (width - len(cells))
                yield (
                    number,
                    {
                        name: (read_cell(cell) if cell[:1] == TEXT_PREFIX else cell.strip())
                        for name, cell in zip(header, cells, strict=True)
                    },
                )
    except UnicodeDecodeError as exc:
        line = _line_of_byte(csv_path)
        raise ImportRejected(
            f"{Path(csv_path).name}: not UTF-8 text near line {line} ({exc.reason}); save the file as UTF-8"
        ) from exc
    except csv.Error as exc:
        # e.g. a field beyond csv's size limit (128 KiB): no row of such a file is trusted.
        where = f" near line {max(reader.line_num, 1)}" if reader is not None else ""
        raise ImportRejected(f"{Path(csv_path).name}: not a readable CSV file{where} ({exc})") from exc
    except FileNotFoundError as exc:
        raise ImportRejected(f"{csv_path}: file not found") from exc
    except OSError as exc:
        raise ImportRejected(f"{csv_path}: cannot read the CSV file ({exc.strerror or exc})") from exc


def _line_of_byte(csv_path: str | os.PathLike[str]) -> int:
    """The 1-based line of the file's first byte that is not UTF-8 (0 when unreadable)."""
    try:
        data = Path(csv_path).read_bytes()
        data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return data[: exc.start].count(b"\n") + 1
    except OSError:
        return 0
    return 0


def csv_header(csv_path: str | os.PathLike[str]) -> list[str]:
    """The header row alone, to tell a file's format (errors as ``csv_rows_stream``)."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            first = next(csv.reader(fh), [])
    except FileNotFoundError as exc:
        raise ImportRejected(f"{csv_path}: file not found") from exc
    except UnicodeDecodeError as exc:
        raise ImportRejected(f"{os.path.basename(csv_path)}: not UTF-8 text ({exc.reason})") from exc
    except csv.Error as exc:
        raise ImportRejected(f"{os.path.basename(csv_path)}: not a readable CSV file ({exc})") from exc
    except OSError as exc:
        raise ImportRejected(f"{csv_path}: cannot read the CSV file ({exc.strerror or exc})") from exc
    return [name.strip() for name in first]
