"""A manifest's rows before they are written: their errors, value and path checks, the plans
and file checks staged between the passes (``Staging``), and what the database holds."""

from __future__ import annotations

import enum
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from studies.batching import batches, in_rows
from studies.errors import DomainError
from studies.imports.rows import ItemUpdate
from studies.jsonbounds import JSONOutOfBounds, json_loads_bounded
from studies.models import Item, Study

T = TypeVar("T")
R = TypeVar("R")

MAX_CHARS = {"image": 1000, "item": 1000, "t2i_model": 200, "category": 100, "word": 200}
MAX_INDEX = 2_147_483_647  # PositiveIntegerField's ceiling on every backend
# A file modified this recently (ns) gets no stamp: its mtime may not change on the next write.
STAMP_MIN_AGE_NS = 2_000_000_000


class DuplicateImage(DomainError):
    """The same bytes are already an item of the study under another path."""


class ImagePathConflict(DomainError):
    """The path or item was already imported into the study with different content."""


class PathOutsideRoot(DomainError):
    """A manifest path escapes the import root (``../``, absolute path, symlink out)."""


class InvalidManifestRow(DomainError):
    """A manifest row with a bad value, an unknown role or question, or a NUL byte."""


class DuplicateManifestRow(InvalidManifestRow):
    """A row repeats the path (or item and role) of an earlier row of the same manifest."""


def manifest_path_resolve(root: Path, given: str) -> Path:
    """The file a manifest path names under the resolved ``root``; ``PathOutsideRoot`` for an
    absolute path, ``..`` or a symlink out."""
    if not given:
        raise InvalidManifestRow("empty 'image' value")
    if given.startswith(("/", "\\")) or os.path.isabs(given) or (len(given) > 1 and given[1] == ":"):
        raise PathOutsideRoot("absolute path refused: paths must be relative to the import root")
    parts = given.replace("\\", "/").split("/")
    if ".." in parts:
        raise PathOutsideRoot("path with '..' refused: it points outside the import root")
    resolved = (root / "/".join(parts)).resolve()  # "\\" is a separator too (manifests made on Windows)
    if not resolved.is_relative_to(root):
        raise PathOutsideRoot("path resolves outside the import root (symlink out)")
    if not resolved.is_file():
        raise InvalidManifestRow("file not found under the import root")
    return resolved


def optional_int(row: dict[str, str], column: str) -> int | None:
    value = row.get(column, "")
    if value == "":
        return None
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidManifestRow(f"{column} must be an integer, got {value!r}") from exc
    if column == "index" and number < 0:
        raise InvalidManifestRow(f"index must be 0 or more, got {number}")
    if column == "index" and number > MAX_INDEX:
        raise InvalidManifestRow(f"index must be at most {MAX_INDEX}, got {number}")
    if column == "seed" and not -(2**63) <= number < 2**63:
        raise InvalidManifestRow(f"seed {number} does not fit in 64 bits")
    return number


def row_params(row: dict[str, str], column: str = "params") -> dict[str, Any]:
    value = row.get(column, "")
    if value == "":
        return {}
    try:
        parsed = json_loads_bounded(value, field="params")
    except JSONOutOfBounds as exc:
        raise InvalidManifestRow(str(exc)) from exc
    if not isinstance(parsed, dict):
        raise InvalidManifestRow('params must be a JSON object, e.g. {"steps": 30}')
    return parsed


def text_problems(row: dict[str, str]) -> list[str]:
    problems = [
        f"column '{column}' contains a NUL character" for column, value in row.items() if "\x00" in value
    ]
    problems.extend(
        f"column '{column}' is longer than {limit} characters"
        for column, limit in MAX_CHARS.items()
        if len(row.get(column, "")) > limit
    )
    return problems


@dataclass(frozen=True)
class RowPlan:
    """A manifest row whose values are sound, before its file is looked at."""

    number: int
    path: str
    file_path: str  # resolved; a str, as it is pickled and read back for every staged row
    item_key: str
    role: str
    t2i_model: str
    prompt_key: tuple[str, str, str] | None
    seed: int | None
    index: int | None
    params: dict[str, Any]
    metadata: dict[str, str]
    question_keys: tuple[str, ...]
    # None when the file was modified too recently to be identified by them (``STAMP_MIN_AGE_NS``).
    file_size: int | None = None
    file_mtime_ns: int | None = None


@dataclass(frozen=True, slots=True)
class KnownLink:
    """An image link the database holds for a row's (item, role): its hash and file stamp."""

    pk: int
    sha256: str
    source_path: str
    file_size: int | None
    file_mtime_ns: int | None

    def same_file(self, plan: RowPlan) -> bool:
        """The row names this link's file, unchanged since (same path, size and mtime)."""
        return (
            plan.file_size is not None
            and self.file_size == plan.file_size
            and self.file_mtime_ns == plan.file_mtime_ns
            and self.source_path == plan.path
        )


@dataclass(frozen=True)
class FileCheck:
    """What reading a row's file found: its hash and image facts, or the error (no bytes kept)."""

    sha256: str = ""
    format: str = ""
    width: int = 0
    height: int = 0
    error: Exception | None = None
    unchanged: bool = False  # the file was not read: its stamp matches the stored link's
    stored: bool = False  # its checked bytes were written to MEDIA_ROOT by the check


@dataclass(frozen=True)
class ItemUpdatePlan:
    """An existing item's id and the field values a re-import gives it."""

    item_id: int
    fields: dict[str, Any]
    report: ItemUpdate


@dataclass(frozen=True, slots=True)
class StoredItem:
    """What a re-import compares of a stored item, read as plain values."""

    pk: int
    key: str
    t2i_model: str
    seed: int | None
    index: int | None
    params: dict[str, Any]
    metadata: dict[str, Any]
    question_keys: list[str]
    completed_seats: int
    prompt_key: tuple[str, str, str] | None

    FIELDS = (
        "pk",
        "key",
        "t2i_model",
        "seed",
        "index",
        "params",
        "metadata",
        "question_keys",
        "completed_seats",
        "prompt_id",
        "prompt__category",
        "prompt__word",
        "prompt__text",
    )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredItem:
        pk, key, model, seed, index, params, metadata, questions, seats, prompt_id, *words = row
        category, word, text = words
        prompt_key = (category, word, text) if prompt_id is not None else None
        return cls(pk, key, model, seed, index, params, metadata, questions, seats, prompt_key)

    @classmethod
    def values(cls, study: Study, keys: list[str]) -> Iterator[StoredItem]:
        return map(cls.from_row, in_rows(Item.objects.filter(study=study), "key", keys, *cls.FIELDS))


def changed_file_message(study: Study, key: str, stored_sha: str) -> str:
    """Why a row naming an existing item with other bytes is refused, and the way out."""
    return (
        f"{key} was already imported with different content (sha256 {stored_sha[:12]}…); an item's "
        f"image cannot be replaced by a re-import: remove the item first with "
        f"`manage.py remove_items --study {study.slug} --item {key}` (add --with-labels if it has "
        "labels), then import it again"
    )


class ReadAgain(enum.Enum):
    """A stored file to read again (``_ManifestImport._stored_still``)."""

    TOKEN = 0


READ_AGAIN = ReadAgain.TOKEN


def rows_reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, DomainError):
        return f"cannot read file: {exc.strerror or exc}"
    return str(exc)


#: Rows per task of the import's thread pools (a task per row costs more than a small file).
POOL_CHUNK_ROWS = 64


def map_chunked(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: list[T]) -> Iterator[R]:
    """``map(fn, items)`` on the pool, in order, ``POOL_CHUNK_ROWS`` items per task."""
    tasks = pool.map(lambda part: [fn(item) for item in part], batches(items, POOL_CHUNK_ROWS))
    return (result for part in tasks for result in part)


@dataclass(frozen=True)
class CheckedBatch:
    """A batch whose rows are planned and whose files are being checked."""

    plans: list[RowPlan]
    known: dict[tuple[str, str], KnownLink]
    known_items: dict[str, StoredItem]
    known_checks: list[FileCheck | None]
    read: Iterator[FileCheck]


class Staging:
    """The scratch state of one manifest import in a temporary SQLite file: paths seen, refused
    items, checked rows, accepted items, updates and stored files."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="biaslab-import-")
        self.folder = self._folder.name
        self.db = sqlite3.connect(Path(self.folder) / "staging.sqlite3", isolation_level=None)
        self.db.executescript(
            """
            PRAGMA journal_mode = OFF;
            PRAGMA synchronous = OFF;
            PRAGMA cache_size = -16000;
            CREATE TABLE paths (k TEXT PRIMARY KEY, number INTEGER) WITHOUT ROWID;
            CREATE TABLE hashes (sha TEXT PRIMARY KEY, number INTEGER, path TEXT) WITHOUT ROWID;
            CREATE TABLE bad_items (k TEXT PRIMARY KEY, first INTEGER) WITHOUT ROWID;
            CREATE TABLE plans (number INTEGER PRIMARY KEY, k TEXT, fresh INTEGER, data BLOB);
            CREATE INDEX plans_by_item ON plans (k, number);
            CREATE TABLE accepted (k TEXT PRIMARY KEY, refused INTEGER DEFAULT 0) WITHOUT ROWID;
            CREATE TABLE updates (k TEXT PRIMARY KEY, data BLOB) WITHOUT ROWID;
            CREATE TABLE new_files (name TEXT PRIMARY KEY) WITHOUT ROWID;
            CREATE TABLE temporaries (path TEXT PRIMARY KEY) WITHOUT ROWID;
            CREATE TABLE written (name TEXT PRIMARY KEY) WITHOUT ROWID;
            CREATE TABLE stamps (link INTEGER PRIMARY KEY, size INTEGER, mtime_ns INTEGER);
            BEGIN;
            """
        )

    def close(self) -> None:
        self.db.close()
        self._folder.cleanup()

    def one(self, sql: str, *params: Any) -> Any:
        return self.db.execute(sql, params).fetchone()

    def rows(self, sql: str, *params: Any) -> Iterator[Any]:
        """The rows of a query, fetched in pages (a dedicated cursor: inserts may go on meanwhile)."""
        cursor = self.db.cursor()
        cursor.execute(sql, params)
        while page := cursor.fetchmany(500):
            yield from page
