"""The one CSV writer every export uses: a text cell a spreadsheet would run as a formula gets
a leading ``'`` (docs/reference/contracts.md); importers undo it with ``read_cell``. And
``atomic_file``, how a written file replaces another only once whole."""

from __future__ import annotations

import csv
import os
import re
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

#: First characters that make a spreadsheet treat a cell as a formula (OWASP's list).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
#: The prefix that makes a spreadsheet keep a cell as text.
TEXT_PREFIX = "'"

_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


@contextmanager
def atomic_file(
    target: Path, mode: str = "w", *, prefix: str, suffix: str = "", **kwargs: Any
) -> Iterator[IO[Any]]:
    """A file at a temporary name beside ``target`` (private, 0600), renamed over it when the
    block ends without error and removed otherwise: a reader sees no file or the whole file."""
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, mode, **kwargs) as out:
            yield out
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _needs_prefix(text: str) -> bool:
    if text.startswith(FORMULA_TRIGGERS):
        return _NUMBER_RE.fullmatch(text) is None
    # A quote the value really has before what would be escaped is escaped too, so import can tell.
    return text.startswith(TEXT_PREFIX) and _needs_prefix(text[1:])


def cell_escape(value: Any) -> Any:
    """The value to write for ``value``: numbers and None as they are, text made inert."""
    if value is None or isinstance(value, int | float | Decimal):
        return value
    text = str(value)
    return TEXT_PREFIX + text if _needs_prefix(text) else text


def cell_unescape(text: str) -> str:
    """The inverse of ``cell_escape`` on text; other text is returned as is."""
    if text.startswith(TEXT_PREFIX) and _needs_prefix(text[1:]):
        return text[1:]
    return text


def read_cell(value: str | None) -> str:
    """A cell as importers use it: None as "", the protective quote removed, stripped."""
    return cell_unescape(value or "").strip()


class SafeWriter:
    """``csv.writer`` whose every cell goes through ``cell_escape``."""

    def __init__(self, fh: IO[str], **fmtparams: Any) -> None:
        self._writer = csv.writer(fh, **fmtparams)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([cell_escape(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


class SafeDictWriter(csv.DictWriter):
    """``csv.DictWriter`` whose every value goes through ``cell_escape``."""

    def writeheader(self) -> Any:
        return self.writer.writerow(list(self.fieldnames))

    def writerow(self, rowdict: Mapping[str, Any]) -> Any:
        return super().writerow({key: cell_escape(value) for key, value in rowdict.items()})

    def writerows(self, rowdicts: Iterable[Mapping[str, Any]]) -> None:
        for rowdict in rowdicts:
            self.writerow(rowdict)


def safe_writer(fh: IO[str], **fmtparams: Any) -> SafeWriter:
    """A CSV writer for exports: like ``csv.writer(fh, **fmtparams)``, formula cells made inert."""
    return SafeWriter(fh, **fmtparams)


def safe_dict_writer(fh: IO[str], fieldnames: Collection[str], **kwargs: Any) -> SafeDictWriter:
    """A dict CSV writer for exports: like ``csv.DictWriter``, formula cells made inert."""
    return SafeDictWriter(fh, fieldnames=list(fieldnames), **kwargs)
