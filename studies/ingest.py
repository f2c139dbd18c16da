"""Bringing images into a study: validate the bytes, store them under their content hash, record
them as items.

Two entry points write here:

- ``item_image_store`` stores one image given as bytes as a one-image item (used by
  ``generate_images``) or as one role of an item (``edit_images``);
- ``images_import`` reads a manifest CSV. Rows sharing an ``item`` value form one item (with a
  ``role`` each: ``input``/``output`` for pairs); without that column each row is a one-image item
  named by its path. Every other column beyond the known ones is kept as item metadata.

All or nothing per row, never half a file: every row is checked first — values, path, and the
file itself (decoded, bounded) — then the files of the good rows are stored and all good rows are
written in ONE transaction. The manifest is streamed: rows are checked a batch at a time and
staged on disk, so memory stays flat whatever its size (``_ManifestImport``). Bad rows are listed by number with the reason and written nowhere; an
item with one bad row is refused whole. If the transaction fails, the files this import stored
and no row points to are removed again.

Every image is opened with Pillow from the allow-list ``settings.BIASLAB_IMAGE_FORMATS``, its
pixel count is checked from the header before anything is decoded (decompression bombs), then
``verify()`` and a full decode catch corrupt and truncated files. Files are stored as
``MEDIA_ROOT/images/<sha[:2]>/<sha>.<ext>``, once whatever the number of items and studies
using them.
"""

from __future__ import annotations

import enum
import hashlib
import multiprocessing
import os
import pickle
import sqlite3
import stat
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar, cast

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import DatabaseError, transaction
from django.db.models import F
from django.utils import timezone

from studies.archive import ArchiveRejected, zip_extract
from studies.batching import (
    IsIn,
    batches,
    bulk_batch_size,
    import_batch_rows,
    in_chunk_size,
    in_chunks,
    rows_insert,
    rows_insert_returning,
)
from studies.database import database_analyze
from studies.errors import DomainError, ImportRejected
from studies.imports.images import (
    ValidatedImage,
    file_write,
    image_facts,
    image_file_get_or_create,
    image_file_validate,
    read_limited,
    storage_name,
)
from studies.imports.pipeline import Audit, import_record
from studies.imports.rows import ImportSummary, ItemUpdate, RejectedRow, csv_rows_stream
from studies.jsonbounds import JSONOutOfBounds, json_loads_bounded
from studies.models import (
    Image,
    ImageRole,
    Item,
    ItemChange,
    ItemChangeAction,
    ItemImage,
    Prompt,
    Question,
    Study,
)
from studies.protocols import DEFAULT_PROTOCOL, protocol_spec
from studies.selectors import study_chosen
from studies.services import MANIFEST_KNOWN_COLUMNS, study_create

# The study imports go to when no --study is given.
DEFAULT_STUDY = "default"

# Generated-image studies need the prompt columns; a pair-change study's rows name their item
# and role instead (seed photos have no prompt).
MANIFEST_REQUIRED_COLUMNS = ("image", "t2i_model", "prompt", "category", "word")
PAIR_MANIFEST_REQUIRED_COLUMNS = ("image", "item", "role")

# Field sizes of the tables the rows go to: a longer value is a row error, not a database crash.
_MAX_CHARS = {"image": 1000, "item": 1000, "t2i_model": 200, "category": 100, "word": 200}
_MAX_INDEX = 2_147_483_647  # PositiveIntegerField's ceiling on every backend
# Threads reading, hashing and decoding files (all release the GIL); the database work stays
# on the calling thread.
IMPORT_WORKERS = min(8, os.cpu_count() or 1)
# A batch with at least this many files to read has them read, hashed, verified and stored by
# worker processes (``BIASLAB_IMPORT_PROCESSES`` of them), not threads: a small file costs
# a dozen system calls and Pillow's Python code, and threads hand the GIL to one another at
# every call. 20,000 small files took 4.1 s on two threads and 1.2 s on two processes, on two
# CPUs. Fewer files stay on threads: a process costs a fork.
PROCESS_MIN_FILES = 500
# Threads storing the checked files: creating a file waits on the file system more than on a
# CPU (measured here: 800 new files/s on one thread, 1,800 on eight, on two CPUs).
STORE_WORKERS = max(IMPORT_WORKERS, 8)
# A file modified this recently (ns) before it was looked at gets no stamp (size, mtime): a
# write in the same tick of the file system's clock would leave its mtime unchanged, so the
# next re-run reads it again rather than trust the stamp (git's "racily clean" entries).
STAMP_MIN_AGE_NS = 2_000_000_000


# The columns of a new item, in the order ``_rows_write`` gives them.
_ITEM_COLUMNS = (
    "study_id",
    "key",
    "prompt_id",
    "t2i_model",
    "seed",
    "index",
    "params",
    "metadata",
    "question_keys",
    "queue",
    "completed_seats",
    "created_at",
)

T = TypeVar("T")
R = TypeVar("R")

# --- Domain errors ------------------------------------------------------------------------------


class DuplicateImage(DomainError):
    """The same bytes are already an item of the study under another path."""


class ImagePathConflict(DomainError):
    """The path or item was already imported into the study with different content."""


class PathOutsideRoot(DomainError):
    """A manifest path escapes the import root (``../``, absolute path, symlink out)."""


class InvalidManifestRow(DomainError):
    """A manifest row has an empty required value, a bad seed/index, params that are not a JSON
    object, a value too long for its field, a NUL byte, or an unknown role or question."""


class DuplicateManifestRow(InvalidManifestRow):
    """A row repeats the path (or item and role) of an earlier row of the same manifest."""


# --- Validation ---------------------------------------------------------------------------------


def import_processes() -> int:
    """Worker processes of a big image import (``settings.BIASLAB_IMPORT_PROCESSES``; one per
    CPU, at most 8, by default); 0 or 1: threads only. Linux only: the workers are forked (they
    inherit the settings and the code as loaded), which other systems do not offer safely."""
    if not sys.platform.startswith("linux"):
        return 0
    return max(0, int(getattr(settings, "BIASLAB_IMPORT_PROCESSES", min(8, os.cpu_count() or 1))))


# --- Single-image services ----------------------------------------------------------------------


def prompt_get_or_create(*, study: Study, category: str, word: str, text: str) -> Prompt:
    """The study's prompt with this category, word and text, created if missing."""
    prompt, _ = Prompt.objects.get_or_create(study=study, category=category, word=word, text=text)
    return prompt


def _existing_item_check(*, study: Study, key: str, role: str, sha256: str) -> Item | None:
    """The item already stored under this key with these bytes in this role, or None; raises
    when the key holds other bytes, or (one-image items) the bytes are another item's."""
    link = (
        ItemImage.objects.filter(item__study=study, item__key=key, role=role)
        .select_related("item", "image")
        .first()
    )
    if link is not None:
        if link.image.sha256 == sha256:
            return link.item
        raise ImagePathConflict(_changed_file_message(study, key, link.image.sha256))
    if role == ImageRole.IMAGE:
        same = (
            ItemImage.objects.filter(item__study=study, role=role, image__sha256=sha256)
            .only("source_path")
            .first()
        )
        if same is not None:
            raise DuplicateImage(f"same image content as {same.source_path}, already in the study")
    return None


@transaction.atomic
def item_image_store(
    *,
    study: Study,
    data: bytes,
    key: str,
    source_path: str | None = None,
    role: str = ImageRole.IMAGE,
    prompt: Prompt | None = None,
    t2i_model: str = "",
    seed: int | None = None,
    index: int | None = None,
    params: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    extra_images: dict[str, Image] | None = None,
) -> tuple[Item, bool]:
    """Validate and store one image of ``study`` as the ``role`` image of the item ``key``
    (created with the given fields when new; ``extra_images`` adds other roles, e.g. the seed
    photo of an edit); return ``(item, created)``.

    The same key with the same bytes returns the existing item (``created`` False), so
    re-running a generation or an import changes nothing. Raises ``ImageRejected`` subclasses
    for unusable bytes, ``DuplicateImage`` when the bytes are already another one-image item of
    the study, ``ImagePathConflict`` when the key holds other bytes.
    """
    validated = image_file_validate(data)
    existing = _existing_item_check(study=study, key=key, role=role, sha256=validated.sha256)
    if existing is not None:
        return existing, False
    image = image_file_get_or_create(validated)
    item = Item.objects.create(
        study=study,
        key=key,
        prompt=prompt,
        t2i_model=t2i_model,
        seed=seed,
        index=index,
        params=params or {},
        metadata=metadata or {},
        # The protocol decides from the metadata which questions the item asks (GEP's explicit
        # images: only their attribute's); [] = all.
        question_keys=protocol_spec(study.protocol).item_question_keys(metadata or {}),
        queue=protocol_spec(study.protocol).queue_default,
    )
    ItemImage.objects.create(item=item, image=image, role=role, source_path=source_path or key)
    for other_role, other in (extra_images or {}).items():
        ItemImage.objects.create(item=item, image=other, role=other_role, source_path=other.file)
    return item, True


# --- Manifest import ----------------------------------------------------------------------------


def manifest_path_resolve(root: Path, given: str) -> Path:
    """The file a manifest path names, refusing anything that leaves ``root``.

    ``root`` must already be resolved. Absolute paths, ``..`` components and symlinks whose
    target lies outside ``root`` raise ``PathOutsideRoot``.
    """
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


def _optional_int(row: dict[str, str], column: str) -> int | None:
    value = row.get(column, "")
    if value == "":
        return None
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidManifestRow(f"{column} must be an integer, got {value!r}") from exc
    if column == "index" and number < 0:
        raise InvalidManifestRow(f"index must be 0 or more, got {number}")
    if column == "index" and number > _MAX_INDEX:
        raise InvalidManifestRow(f"index must be at most {_MAX_INDEX}, got {number}")
    if column == "seed" and not -(2**63) <= number < 2**63:
        raise InvalidManifestRow(f"seed {number} does not fit in 64 bits")
    return number


def _params(row: dict[str, str]) -> dict[str, Any]:
    value = row.get("params", "")
    if value == "":
        return {}
    try:
        parsed = json_loads_bounded(value, field="params")
    except JSONOutOfBounds as exc:
        raise InvalidManifestRow(str(exc)) from exc
    if not isinstance(parsed, dict):
        raise InvalidManifestRow('params must be a JSON object, e.g. {"steps": 30}')
    return parsed


def _text_problems(row: dict[str, str]) -> list[str]:
    problems = [
        f"column '{column}' contains a NUL character" for column, value in row.items() if "\x00" in value
    ]
    problems.extend(
        f"column '{column}' is longer than {limit} characters"
        for column, limit in _MAX_CHARS.items()
        if len(row.get(column, "")) > limit
    )
    return problems


@dataclass(frozen=True)
class _RowPlan:
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
    # The file's size and mtime when its path was checked (before it is read), or None when it
    # was modified too recently to identify it by them (``STAMP_MIN_AGE_NS``).
    file_size: int | None = None
    file_mtime_ns: int | None = None


@dataclass(frozen=True, slots=True)
class _KnownLink:
    """An image link the database already holds for a manifest row's (item, role): its bytes'
    hash and what identified the file it was imported from (``ItemImage``)."""

    pk: int
    sha256: str
    source_path: str
    file_size: int | None
    file_mtime_ns: int | None

    def same_file(self, plan: _RowPlan) -> bool:
        """The row names the file this link was imported from, unchanged since: same path, size
        and mtime (then it holds the same bytes, checked then, and is not read again)."""
        return (
            plan.file_size is not None
            and self.file_size == plan.file_size
            and self.file_mtime_ns == plan.file_mtime_ns
            and self.source_path == plan.path
        )


@dataclass(frozen=True)
class _FileCheck:
    """What reading a row's file found: its hash and validated facts, or the error. The bytes
    are not kept: 6,000 photos would not fit in memory; the write step reads them again."""

    sha256: str = ""
    format: str = ""
    width: int = 0
    height: int = 0
    error: Exception | None = None
    unchanged: bool = False  # the file was not read: its stamp matches the stored link's
    stored: bool = False  # its checked bytes were written to MEDIA_ROOT by the check


@dataclass(frozen=True)
class _ItemUpdatePlan:
    """An existing item (its id) and the field values a re-import gives it (``prompt``: a
    prompt key)."""

    item_id: int
    fields: dict[str, Any]
    report: ItemUpdate


@dataclass(frozen=True, slots=True)
class _StoredItem:
    """What a re-import compares of an item already stored: read as plain values (a model
    instance per row costs more than the comparison, at a million rows)."""

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

    #: The item's columns read, in the order ``from_row`` takes them.
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
    def from_row(cls, row: Sequence[Any]) -> _StoredItem:
        pk, key, model, seed, index, params, metadata, questions, seats, prompt_id, *words = row
        category, word, text = words
        return cls(
            pk,
            key,
            model,
            seed,
            index,
            params,
            metadata,
            questions,
            seats,
            (category, word, text) if prompt_id is not None else None,
        )

    @classmethod
    def values(cls, study: Study, keys: list[str]) -> Iterator[_StoredItem]:
        for part in in_chunks(keys):
            for row in Item.objects.filter(study=study, key__in=part).values_list(*cls.FIELDS):
                yield cls.from_row(row)


def _changed_file_message(study: Study, key: str, stored_sha: str) -> str:
    """Why a row naming an existing item with other bytes is refused, and the way out."""
    return (
        f"{key} was already imported with different content (sha256 {stored_sha[:12]}…); an item's "
        f"image cannot be replaced by a re-import: remove the item first with "
        f"`manage.py remove_items --study {study.slug} --item {key}` (add --with-labels if it has "
        "labels), then import it again"
    )


class _ReadAgain(enum.Enum):
    """A stored file to read again (``_ManifestImport._stored_still``)."""

    TOKEN = 0


_READ_AGAIN = _ReadAgain.TOKEN


def _rows_reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, DomainError):
        return f"cannot read file: {exc.strerror or exc}"
    return str(exc)


#: Rows per task of the import's thread pools: a task per row cost a future, a lock and a
#: thread wake-up each (35 futex calls a row, measured), more than checking a small file.
POOL_CHUNK_ROWS = 64


def _map_chunked(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: list[T]) -> Iterator[R]:
    """``map(fn, items)`` on the pool, in order, ``POOL_CHUNK_ROWS`` items per task."""
    tasks = pool.map(lambda part: [fn(item) for item in part], batches(items, POOL_CHUNK_ROWS))
    return (result for part in tasks for result in part)


def _file_checked(path: str, *, known: bool, store: bool, file_new: Callable[[str, str], None]) -> _FileCheck:
    """Read and hash one file; unless ``known`` (already imported: hashed only, no decoding)
    validate it and, when ``store``, write its bytes to MEDIA_ROOT from the bytes in hand (not
    read a second time to store them; ``file_new(name, temporary)`` is told first, for the
    clean-up: a row refused later leaves an orphan that the import removes). Runs in worker
    threads or processes: touches no state but ``file_new``'s."""
    try:
        data = read_limited(path)
        sha = hashlib.sha256(data).hexdigest()
        if known:
            return _FileCheck(sha256=sha)
        fmt, width, height = image_facts(data)
        stored = False
        if store:
            try:
                file_write(
                    ValidatedImage(data=data, sha256=sha, format=fmt, width=width, height=height),
                    before_write=file_new,
                )
                stored = True
            except OSError:
                pass  # not stored: the store step tries again and names the reason
        return _FileCheck(sha256=sha, format=fmt, width=width, height=height, stored=stored)
    except (DomainError, OSError) as exc:
        return _FileCheck(error=exc)


# In a worker process of an import: the descriptor of its journal, where it names each file
# before creating it (the import process reads the journals for its clean-up: a file a worker
# created is removed even when the import is interrupted before the worker's answer arrives).
_journal: int | None = None
_JOURNAL_PREFIX = "new-files-"


def _worker_start(journal_folder: str) -> None:
    global _journal
    _journal = os.open(
        os.path.join(journal_folder, f"{_JOURNAL_PREFIX}{os.getpid()}"),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o600,
    )


def _journal_write(name: str, temporary: str) -> None:
    assert _journal is not None  # set by _worker_start
    # One append: never interleaved with another's. A name holds no tab or newline (a hash and
    # an extension); the temporary path is the rest of the line.
    os.write(_journal, f"{name}\t{temporary}\n".encode())


def _files_checked(tasks: list[tuple[str, bool, bool]]) -> list[_FileCheck]:
    """``_file_checked`` of each ``(path, known, store)``, in a worker process."""
    return [
        _file_checked(path, known=known, store=store, file_new=_journal_write) for path, known, store in tasks
    ]


def _worker_died() -> ImportRejected:
    # A worker killed (out of memory) or crashed (a decoder's fault on a hostile file): the
    # import stops whole, and its clean-up removes what was stored.
    return ImportRejected(
        "a worker process checking the image files stopped abruptly (killed, out of memory, or "
        "crashed on a file); nothing was written. Importing again with BIASLAB_IMPORT_PROCESSES=0 "
        "checks the files in the import's own process"
    )


@dataclass(frozen=True)
class _CheckedBatch:
    """A batch whose rows are planned and whose files are being checked
    (``_ManifestImport._batch_start``): its rows' plans, what the database held for them, the
    checks already known (a file unchanged since its import) and the others, as they come in."""

    size: int  # rows of the batch, refused ones included
    plans: list[_RowPlan]
    known: dict[tuple[str, str], _KnownLink]
    known_items: dict[str, _StoredItem]
    known_checks: list[_FileCheck | None]
    read: Iterator[_FileCheck]


class _Staging:
    """The scratch state of one manifest import, in a temporary SQLite file (never the project's
    database): the paths and hashes seen so far (duplicates across the whole file), the items
    with a refused row, every checked row waiting for its item to be settled, the items
    accepted, the updates planned and the files stored. A manifest of a million rows costs
    disk here, not memory: the import holds one batch of rows at a time."""

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


class _ManifestImport:
    """One manifest import, streamed: the rows are checked a batch at a time (values, then
    files in a thread pool — Pillow, hashlib and file I/O release the GIL — then settled in file
    order, so messages such as "same content as row 3" never depend on thread timing) and staged
    on disk (``_Staging``); then items are settled (a refused row refuses its item, rows of an
    item must agree), the files of the good rows stored, and every new item and update written
    in ONE transaction, a chunk of items per statement group.

    Why two passes rather than a transaction per batch: a bad row near the end of the file must
    leave nothing written, and an item's rows may lie anywhere in the file; only once every row
    has been checked is it known which items are good. Memory holds one batch of rows (and one
    chunk of items) whatever the file's size; every ``__in`` list and INSERT is split under the
    database's variable limit (``studies.batching``)."""

    def __init__(
        self,
        *,
        study: Study,
        root: Path,
        summary: ImportSummary,
        columns: list[str],
        dry_run: bool = False,
        audit: Audit | None = None,
        stage_progress: Callable[[str, int], None] | None = None,
    ) -> None:
        self.study = study
        self.root = root
        self.summary = summary
        self.dry_run = dry_run
        self.audit = audit or Audit(user=None, source="")
        self.stage_progress = stage_progress
        self.columns = set(columns)
        self.has_item_column = "item" in columns
        # Without an ``item`` column every row is a one-image item of its own, settled within
        # its batch (``_one_image_items_settle``).
        self.one_image = not self.has_item_column
        self.metadata_columns = [c for c in columns if c not in MANIFEST_KNOWN_COLUMNS]
        self.spec = protocol_spec(study.protocol)
        self.roles = set(self.spec.image_roles)
        self.question_keys = set(Question.objects.filter(study=study).values_list("key", flat=True))
        self.pairs = protocol_spec(study.protocol).paired
        # What the database holds for the batch being checked: (key, role) → sha of the rows'
        # items, and sha → key of the one-image items with the batch's bytes. Loaded per batch
        # (a few queries), so per-row checks never touch the database.
        self.known: dict[tuple[str, str], _KnownLink] = {}
        self.known_items: dict[str, _StoredItem] = {}
        # Manifest folders (as written) → their resolved path, "" when outside the root.
        self.folders: dict[str, str] = {}
        self.single_by_hash: dict[str, str] = {}
        # (link id, size, mtime) of the batch's known files read again with the same bytes.
        self.stamps: list[tuple[int, int, int | None]] = []
        # Reports of the updates settled within their batch (``_one_image_items_settle``).
        self.settled_reports: list[ItemUpdate] = []
        self.staging = _Staging()
        # Set once the write's transaction is over: the files it names in ``written`` are used.
        self.committed = False
        # Storage names of the files this import wrote (from worker threads), moved to the
        # staging table after each batch, for the clean-up.
        self.new_files: list[str] = []
        self.new_files_lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=IMPORT_WORKERS, thread_name_prefix="image-import")
        self.store_pool = ThreadPoolExecutor(max_workers=STORE_WORKERS, thread_name_prefix="image-store")
        # The worker processes of the check pass (``_files_read``), while it runs.
        self.processes: ProcessPoolExecutor | None = None
        # How far each worker process's journal of new files has been read (bytes).
        self.journals_read: dict[str, int] = {}

    def close(self) -> None:
        self._processes_stop()
        self.pool.shutdown()
        self.store_pool.shutdown()
        self.staging.close()

    def reject(self, number: int, path: str, reason: str) -> None:
        self.summary.rejected.append(RejectedRow(number, path, reason))

    def _advance(self, stage: str, rows: int) -> None:
        if self.stage_progress is not None and rows:
            self.stage_progress(stage, rows)

    def _bad_item(self, key: str, number: int) -> None:
        """Mark an item refused by its row ``number``; the item's first refused row in the file
        is kept (batches overlap: a later batch's rows may be planned before an earlier one is
        settled)."""
        self.staging.db.execute(
            "INSERT INTO bad_items VALUES (?, ?) "
            "ON CONFLICT (k) DO UPDATE SET first = excluded.first WHERE excluded.first < bad_items.first",
            (key, number),
        )

    def row_plan(self, number: int, row: dict[str, str]) -> _RowPlan:
        """Check a row's values and path (in file order); raises the row's rejection, naming
        every problem of the row at once (a repeated row: only that it repeats one)."""
        path = row.get("image", "")
        if "__error__" in row:
            raise InvalidManifestRow(row["__error__"])
        problems = _text_problems(row)
        item_key = row.get("item", "") if self.has_item_column else path
        if not item_key and self.has_item_column:
            problems.append("empty 'item' value")
        role = row.get("role", "") or (ImageRole.IMAGE if not self.pairs else "")
        if not role:
            problems.append(
                "empty 'role' value: each row of a pair is its input (the seed photo) or its output (the edit)"
            )
        elif role not in self.roles:
            problems.append(
                f"role {role!r} is not a role of a {self.study.protocol} study "
                f"(roles: {', '.join(sorted(self.roles))})"
            )
        if item_key and role in self.roles:
            # One statement for the usual new path; the earlier row is looked up only when it
            # is not new.
            path_key = f"{role}\x00{item_key}"
            if not self.staging.db.execute(
                "INSERT OR IGNORE INTO paths VALUES (?, ?)", (path_key, number)
            ).rowcount:
                seen = self.staging.one("SELECT number FROM paths WHERE k = ?", path_key)
                what = "image path" if not self.has_item_column else f"item and role ({role})"
                raise DuplicateManifestRow(f"duplicate row: same {what} as row {seen[0]}")
        needs_prompt = not (self.pairs and role == ImageRole.INPUT)
        if needs_prompt and not self.pairs:
            empty = [c for c in ("t2i_model", "prompt", "category", "word") if not row.get(c)]
            if len(empty) == 1:
                problems.append(f"empty required value in column '{empty[0]}'")
            elif empty:
                problems.append(f"empty required values in columns {', '.join(repr(c) for c in empty)}")
        prompt_key = None
        if row.get("prompt"):
            prompt_key = (row.get("category", ""), row.get("word", ""), row["prompt"])
        questions = tuple(q for q in row.get("questions", "").replace("|", " ").split() if q)
        unknown = [q for q in questions if q not in self.question_keys]
        if unknown:
            problems.append(
                f"question {unknown[0]!r} is not a question of the study ({', '.join(sorted(self.question_keys))})"
                if len(unknown) == 1
                else f"questions {', '.join(repr(q) for q in unknown)} are not questions of the study "
                f"({', '.join(sorted(self.question_keys))})"
            )
        values: dict[str, Any] = {}
        for name, parse in (
            ("seed", lambda: _optional_int(row, "seed")),
            ("index", lambda: _optional_int(row, "index")),
            ("params", lambda: _params(row)),
        ):
            try:
                values[name] = parse()
            except InvalidManifestRow as exc:
                problems.append(str(exc))
        metadata = {c: row[c] for c in self.metadata_columns if row.get(c, "") != ""}
        problem = self.spec.row_problem(row, metadata, self.study.parameters)
        if problem:  # the protocol's own check (e.g. GEP: gender woman|man; the compared column)
            problems.append(problem)
        file_path, file_stat = None, None
        if "\x00" not in path and len(path) <= _MAX_CHARS["image"]:  # else already named above
            try:
                file_path, file_stat = self._file_resolve(path)
            except (DomainError, OSError) as exc:
                problems.append(_rows_reason(exc))
        if problems or file_path is None or file_stat is None:
            # One error per row, every problem in it: a file is fixed in one round, not one
            # column per run.
            raise InvalidManifestRow("; ".join(problems))
        stamped = file_stat.st_mtime_ns <= time.time_ns() - STAMP_MIN_AGE_NS
        return _RowPlan(
            number=number,
            path=path,
            file_path=str(file_path),
            item_key=item_key,
            role=role,
            t2i_model=row.get("t2i_model", ""),
            prompt_key=prompt_key,
            seed=values["seed"],
            index=values["index"],
            params=values["params"],
            metadata=metadata,
            question_keys=questions,
            file_size=file_stat.st_size if stamped else None,
            file_mtime_ns=file_stat.st_mtime_ns if stamped else None,
        )

    def _file_resolve(self, given: str) -> tuple[str, os.stat_result]:
        """The file a manifest path names (as ``manifest_path_resolve``, which words every
        refusal) and its ``stat``. Fast path for the common case — a regular file, not a link,
        in a folder inside the root: its folder is resolved once per import (cached), the file
        costs one ``lstat``; anything else takes ``manifest_path_resolve``."""
        normal = given.replace("\\", "/")
        folder, _, name = normal.rpartition("/")
        if (
            given
            and name not in ("", ".", "..")
            and not given.startswith(("/", "\\"))
            and not os.path.isabs(given)
            and not (len(given) > 1 and given[1] == ":")
            and ".." not in normal.split("/")
        ):
            resolved_folder = self.folders.get(folder)
            if resolved_folder is None:
                real = Path(os.path.realpath(self.root / folder)) if folder else self.root
                resolved_folder = self.folders[folder] = str(real) if real.is_relative_to(self.root) else ""
            if resolved_folder:
                candidate = os.path.join(resolved_folder, name)
                try:
                    found = os.lstat(candidate)
                except OSError:
                    found = None
                if found is not None and stat.S_ISREG(found.st_mode):
                    return candidate, found
        resolved = manifest_path_resolve(self.root, given)
        return str(resolved), resolved.stat()

    def file_check(self, job: tuple[_RowPlan, bool]) -> _FileCheck:
        """Read, hash and validate one file (``_file_checked``; ``job``: the row's plan and
        whether its item and role are already imported). Runs in worker threads."""
        plan, known = job
        return _file_checked(plan.file_path, known=known, store=not self.dry_run, file_new=self._file_new)

    def _files_read(
        self, plans: list[_RowPlan], known: Mapping[tuple[str, str], _KnownLink]
    ) -> Iterator[_FileCheck]:
        """The file check of each plan, in order (``known``: the batch's stored links, as
        ``_known_load`` read them: a row already imported, with the same bytes or not, is hashed
        only): on the worker processes for a batch of many files (``PROCESS_MIN_FILES``), else
        on the threads. Started now, answered as the iterator is read."""
        processes = import_processes()
        if processes < 2 or len(plans) < PROCESS_MIN_FILES:
            return _map_chunked(
                self.pool, self.file_check, [(plan, (plan.item_key, plan.role) in known) for plan in plans]
            )
        if self.processes is None:
            # Forked (the children inherit the settings, as the threads would see them);
            # started once, at the first big batch, and stopped when the check pass ends.
            self.processes = ProcessPoolExecutor(
                max_workers=processes,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_worker_start,
                initargs=(self.staging.folder,),
            )
        store = not self.dry_run
        try:
            tasks = self.processes.map(
                _files_checked,
                (
                    [(plan.file_path, (plan.item_key, plan.role) in known, store) for plan in part]
                    for part in batches(plans, POOL_CHUNK_ROWS)
                ),
            )
        except BrokenProcessPool as exc:  # a worker died while the batch before was checked
            raise _worker_died() from exc

        def checks() -> Iterator[_FileCheck]:
            try:
                for part in tasks:
                    yield from part
            except BrokenProcessPool as exc:
                raise _worker_died() from exc

        return checks()

    def _processes_stop(self) -> None:
        """Stop the worker processes (what they were given and have not begun is dropped), and
        wait for them: after this no file is created behind the import's back."""
        if self.processes is not None:
            self.processes.shutdown(wait=True, cancel_futures=True)
            self.processes = None

    def row_settle(self, plan: _RowPlan, check: _FileCheck) -> bool:
        """Decide a row in file order: True when it is new, False when already imported."""
        if check.error is not None:
            raise check.error
        sha = check.sha256
        known = self.known.get((plan.item_key, plan.role))
        # A row already imported with these bytes is not entered in ``hashes``: another row of
        # the file with the same content is refused all the same, by the database's copy
        # (``single_by_hash``), and a re-run of a million unchanged rows does not fill a
        # staging table keyed by random hashes.
        if plan.role == ImageRole.IMAGE and (known is None or known.sha256 != sha):
            new = self.staging.db.execute(
                "INSERT OR IGNORE INTO hashes VALUES (?, ?, ?)", (sha, plan.number, plan.path)
            ).rowcount
            if not new:
                seen = self.staging.one("SELECT number, path FROM hashes WHERE sha = ?", sha)
                raise DuplicateImage(f"duplicate row: same image content as row {seen[0]} ({seen[1]})")
        if known is not None and known.sha256 == sha:
            if check.unchanged:
                self.summary.unchanged_files += 1
            elif plan.file_size is not None and plan.path == known.source_path:
                # Same bytes, read again (touched, copied, or imported before files were
                # stamped): store the new stamp, so the next re-run need not read it.
                self.stamps.append((known.pk, plan.file_size, plan.file_mtime_ns))
            return False
        if known is not None:
            raise ImagePathConflict(_changed_file_message(self.study, plan.item_key, known.sha256))
        if plan.role == ImageRole.IMAGE and sha in self.single_by_hash:
            raise DuplicateImage(f"same image content as {self.single_by_hash[sha]}, already in the study")
        return True

    def run(self, rows: Iterable[tuple[int, dict[str, str]]]) -> int:
        """Import the rows; return how many were read."""
        n_rows = 0
        try:
            # Two batches in flight: while the workers check a batch's files, this thread plans
            # the next batch's rows, then settles the first (in file order, as before).
            pending: _CheckedBatch | None = None
            for batch in batches(rows, import_batch_rows()):
                started = self._batch_start(batch)
                if pending is not None:
                    self._batch_finish(pending)
                pending = started
                n_rows += len(batch)
            if pending is not None:
                self._batch_finish(pending)
            self._processes_stop()
            updates = self._items_settle()
            self._write(updates)
        finally:
            # Whatever happens — a refused item, a bad line further down the file, a database
            # error, Ctrl-C — the files this import stored that no Image row points to
            # afterwards are removed again, so MEDIA_ROOT never keeps an orphan. The workers
            # are stopped first (a file check still queued is dropped, one running finishes):
            # no file is created after the last look at what they created.
            self.pool.shutdown(wait=True, cancel_futures=True)
            self._processes_stop()
            self._new_files_flush()
            self._orphans_remove()
        return n_rows

    def _batch_start(self, batch: list[tuple[int, dict[str, str]]]) -> _CheckedBatch:
        """Plan a batch's rows (their values and paths, in file order), read what the database
        holds for them, and start the check of the files to read; ``_batch_finish`` settles
        them."""
        plans: list[_RowPlan] = []
        for number, row in batch:
            try:
                plans.append(self.row_plan(number, row))
            except (DomainError, OSError) as exc:
                self.reject(number, row.get("image", ""), _rows_reason(exc))
                key = row.get("item", "") if self.has_item_column else row.get("image", "")
                if key and not isinstance(exc, DuplicateManifestRow):
                    # A repeated row is refused alone: the item of its first row stays good.
                    self._bad_item(key, number)
        known, known_items = self._known_load(plans)
        # Files unchanged since their import are not read (no worker needed); the others are
        # read, hashed and verified by the workers.
        known_checks: list[_FileCheck | None] = [
            _FileCheck(sha256=link.sha256, unchanged=True)
            if (link := known.get((plan.item_key, plan.role))) is not None and link.same_file(plan)
            else None
            for plan in plans
        ]
        to_read = [plan for plan, check in zip(plans, known_checks, strict=True) if check is None]
        return _CheckedBatch(
            size=len(batch),
            plans=plans,
            known=known,
            known_items=known_items,
            known_checks=known_checks,
            read=self._files_read(to_read, known),
        )

    def _batch_finish(self, started: _CheckedBatch) -> None:
        """Settle a started batch's rows in file order, as their checks come in, and stage the
        good ones (fresh or already imported)."""
        plans = started.plans
        # What ``row_settle`` and ``_one_image_items_settle`` compare the rows with.
        self.known, self.known_items = started.known, started.known_items
        read = started.read
        checks = [check if check is not None else next(read) for check in started.known_checks]
        self.single_by_hash = {
            sha: key
            for chunk in in_chunks(c.sha256 for c in checks if c.error is None and not c.unchanged)
            for sha, key in ItemImage.objects.filter(
                item__study=self.study, role=ImageRole.IMAGE, image__sha256__in=chunk
            ).values_list("image__sha256", "item__key")
        }
        staged = []
        new_keys: list[str] = []
        known_plans: list[_RowPlan] = []
        for plan, check in zip(plans, checks, strict=True):
            try:
                fresh = self.row_settle(plan, check)
            except (DomainError, OSError) as exc:
                self.reject(plan.number, plan.path, _rows_reason(exc))
                self._bad_item(plan.item_key, plan.number)
                continue
            if self.one_image and not fresh:
                known_plans.append(plan)
                continue
            if self.one_image:
                new_keys.append(plan.item_key)
            staged.append((plan.number, plan.item_key, int(fresh), pickle.dumps((plan, check))))
        self.staging.db.executemany("INSERT INTO plans VALUES (?, ?, ?, ?)", staged)
        self.staging.db.executemany("INSERT OR REPLACE INTO stamps VALUES (?, ?, ?)", self.stamps)
        self.stamps = []
        if self.one_image:
            self._one_image_items_settle(new_keys, known_plans)
        self._new_files_flush()
        self._advance("checked", started.size)

    def _known_load(
        self, plans: list[_RowPlan]
    ) -> tuple[dict[tuple[str, str], _KnownLink], dict[str, _StoredItem]]:
        """What the database holds for the batch's items: their image links (``known``) and,
        for a manifest of one-image items, the items themselves (``known_items``, read in the
        same query: ``_one_image_items_settle`` compares them)."""
        link_fields = (
            "pk",
            "item__key",
            "role",
            "image__sha256",
            "source_path",
            "file_size",
            "file_mtime_ns",
        )
        item_fields = tuple(f"item__{name}" for name in _StoredItem.FIELDS) if self.one_image else ()
        known: dict[tuple[str, str], _KnownLink] = {}
        known_items: dict[str, _StoredItem] = {}
        for chunk in in_chunks(plan.item_key for plan in plans):
            for row in ItemImage.objects.filter(
                IsIn(F("item__key"), chunk), item__study=self.study
            ).values_list(*link_fields, *item_fields):
                pk, key, role, sha, source_path, size, mtime_ns = row[: len(link_fields)]
                known[(key, role)] = _KnownLink(pk, sha, source_path, size, mtime_ns)
                if item_fields:
                    known_items[key] = _StoredItem.from_row(row[len(link_fields) :])
        return known, known_items

    def _one_image_items_settle(self, new_keys: list[str], known_plans: list[_RowPlan]) -> None:
        """Settle the batch's items of a manifest of one-image items (no ``item`` column) now,
        not after the whole file: each such row is its item's only one (a repeated path is
        refused alone, so no later row can refuse or change its item). A new item is accepted
        unless its row was refused; an item already imported with the same bytes is compared
        with the stored one (read with its links, ``_known_load``), staged only when the row
        changes it (an update), else counted as a duplicate and forgotten. A re-run of a
        million unchanged rows thus stages nothing, and no import of such a manifest sorts its
        staged rows by item (``_items_settle`` has nothing left to do)."""
        keys = new_keys + [plan.item_key for plan in known_plans]
        bad = {
            key
            for part in in_chunks(keys)
            for (key,) in self.staging.db.execute(
                f"SELECT k FROM bad_items WHERE k IN ({','.join('?' * len(part))})", part
            )
        }
        self.staging.db.executemany(
            "INSERT INTO accepted (k) VALUES (?)", [(key,) for key in new_keys if key not in bad]
        )
        staged_updates: list[tuple[str, bytes]] = []
        for plan in known_plans:
            item = self.known_items.get(plan.item_key)
            update, refused = None, False
            if plan.item_key not in bad and item is not None:
                update, refused = self._update_plan(plan.item_key, [plan], item, self.spec)
            if update is not None:
                staged_updates.append((plan.item_key, pickle.dumps(update)))
                self.settled_reports.append(update.report)
            elif not refused:
                self.summary.duplicates += 1
        self.staging.db.executemany("INSERT INTO updates VALUES (?, ?)", staged_updates)

    def _groups(self) -> Iterator[tuple[str, list[tuple[bool, _RowPlan, _FileCheck]]]]:
        """The staged rows item by item, in the order of each item's first row (as the file
        lists them), each item's rows in file order."""
        key: str | None = None
        rows: list[tuple[bool, _RowPlan, _FileCheck]] = []
        for k, fresh, data in self.staging.rows(
            "SELECT p.k, p.fresh, p.data FROM plans p JOIN (SELECT k, min(number) AS f FROM plans GROUP BY k) "
            "g ON g.k = p.k ORDER BY g.f, p.number"
        ):
            if k != key and rows:
                yield cast(str, key), rows
                rows = []
            key = k
            plan, check = pickle.loads(data)
            rows.append((bool(fresh), plan, check))
        if rows:
            yield cast(str, key), rows

    def _items_settle(self) -> list[ItemUpdate]:
        """Settle every item from its staged rows, a chunk of items at a time: new items with a
        refused row, with rows that disagree or (pairs) without both roles are refused whole,
        each row named; the other new items are accepted. Items already imported whose rows say
        something new are planned as updates (staged); the rest count as duplicates. Returns
        the updates' reports."""
        reports: list[ItemUpdate] = list(self.settled_reports)
        if self.one_image:  # settled batch by batch (``_one_image_items_settle``)
            return reports
        spec = protocol_spec(self.study.protocol)
        for chunk in batches(self._groups(), in_chunk_size()):
            keys = [key for key, _ in chunk]
            bad_items = dict(
                row
                for part in in_chunks(keys)
                for row in self.staging.db.execute(
                    f"SELECT k, first FROM bad_items WHERE k IN ({','.join('?' * len(part))})", part
                )
            )
            roles: dict[str, set[str]] = {}
            if self.pairs:
                for key, role in ItemImage.objects.filter(
                    item__study=self.study, item__key__in=keys
                ).values_list("item__key", "role"):
                    roles.setdefault(key, set()).add(role)
            same_keys = [key for key, rows in chunk if any(not fresh for fresh, _, _ in rows)]
            stored = {item.key: item for item in _StoredItem.values(self.study, same_keys)}
            accepted: list[tuple[str]] = []
            staged_updates: list[tuple[str, bytes]] = []
            for key, rows in chunk:
                fresh = [plan for is_fresh, plan, _ in rows if is_fresh]
                same = [plan for is_fresh, plan, _ in rows if not is_fresh]
                new_item = False
                if fresh:
                    if key in bad_items:
                        reason: str | None = (
                            f"item {key} has a refused row (row {bad_items[key]}): the item is not imported"
                        )
                    else:
                        reason = self._item_problem(key, fresh, roles.get(key, set()))
                    if reason:
                        for plan in fresh:
                            self.reject(plan.number, plan.path, reason)
                    else:
                        accepted.append((key,))
                        new_item = True
                update, refused = None, False
                if same and key not in bad_items and not new_item and key in stored:
                    update, refused = self._update_plan(key, same, stored[key], spec)
                if update is not None:
                    staged_updates.append((key, pickle.dumps(update)))
                    reports.append(update.report)
                elif not refused:
                    self.summary.duplicates += len(same)
            self.staging.db.executemany("INSERT INTO accepted (k) VALUES (?)", accepted)
            self.staging.db.executemany("INSERT INTO updates VALUES (?, ?)", staged_updates)
        return reports

    def _item_problem(self, key: str, plans: list[_RowPlan], stored_roles: set[str]) -> str | None:
        for field_name in ("t2i_model", "prompt_key", "seed", "index"):
            values = {getattr(p, field_name) for p in plans if getattr(p, field_name) not in ("", None)}
            if len(values) > 1:
                return f"item {key}: its rows disagree on {field_name.replace('_key', '')}"
        if self.pairs:
            roles = {p.role for p in plans} | stored_roles
            missing = [r for r in (ImageRole.INPUT, ImageRole.OUTPUT) if r not in roles]
            if missing:
                return f"pair item {key} has no {missing[0]} image (a pair needs its seed photo and its edit)"
        return None

    def _update_plan(
        self, key: str, plans: list[_RowPlan], item: _StoredItem, spec: Any
    ) -> tuple[_ItemUpdatePlan | None, bool]:
        """``(update, refused)`` for an already imported item (same key, same bytes) from its
        rows: what they now say about it (model, prompt (category, word, text), seed, index,
        params, metadata columns), or None when nothing changed; ``refused`` when its rows
        were refused (named in the summary).

        Only the columns the manifest has are compared: a manifest without ``params`` leaves
        the stored params alone, and a metadata column it lacks is kept. Changing which
        questions an item asks is refused once it has labels (it would change what the labels
        answer).
        """
        problem = self._item_problem(key, plans, set())
        if problem:
            for p in plans:
                self.reject(p.number, p.path, problem)
            return None, True
        metadata_columns = set(self.metadata_columns)
        first = next((p for p in plans if p.role in (ImageRole.OUTPUT, ImageRole.IMAGE)), plans[0])
        metadata = {k: v for k, v in item.metadata.items() if k not in metadata_columns}
        for p in plans:
            metadata.update(p.metadata)
        candidates: list[tuple[str, str, Any, Any]] = [
            (
                "t2i_model",
                "t2i_model",
                item.t2i_model,
                next((p.t2i_model for p in plans if p.t2i_model), ""),
            ),
            ("seed", "seed", item.seed, next((p.seed for p in plans if p.seed is not None), None)),
            ("index", "index", item.index, next((p.index for p in plans if p.index is not None), None)),
            ("params", "params", item.params, first.params),
        ]
        if metadata_columns:
            candidates.append(("metadata", "", item.metadata, metadata))
        changes: dict[str, tuple[Any, Any]] = {}
        fields: dict[str, Any] = {}
        for name, column, old, new in candidates:
            if (not column or column in self.columns) and old != new:
                changes[name] = (old, new)
                fields[name] = new
        prompt_key = next((p.prompt_key for p in plans if p.prompt_key), None)
        old_key = item.prompt_key
        if "prompt" in self.columns and prompt_key != old_key:
            for name, index in (("category", 0), ("word", 1), ("prompt", 2)):
                before = old_key[index] if old_key else ""
                after = prompt_key[index] if prompt_key else ""
                if before != after:
                    changes[name] = (before, after)
            fields["prompt"] = prompt_key
        explicit = list(next((p.question_keys for p in plans if p.question_keys), ()))
        # Metadata decides the questions only of items whose questions it decided (none named
        # in a 'questions' column at their import).
        derived = item.question_keys == spec.item_question_keys(item.metadata)
        if "questions" in self.columns or ("metadata" in fields and derived):
            question_keys = explicit or spec.item_question_keys(fields.get("metadata", item.metadata))
            if question_keys != item.question_keys:
                if item.completed_seats > 0:
                    reason = (
                        f"item {key} already has labels: the questions it asks cannot change "
                        f"({', '.join(item.question_keys) or 'all'} → {', '.join(question_keys) or 'all'}); "
                        f"remove it first (remove_items --study {self.study.slug} --item {key} "
                        "--with-labels) and import it again"
                    )
                    for p in plans:
                        self.reject(p.number, p.path, reason)
                    return None, True
                changes["questions"] = (item.question_keys, question_keys)
                fields["question_keys"] = question_keys
        if not changes:
            return None, False
        return _ItemUpdatePlan(item_id=item.pk, fields=fields, report=ItemUpdate(key, changes)), False

    def _updates_write(
        self, updates: list[_ItemUpdatePlan], prompts: dict[tuple[str, str, str], Prompt]
    ) -> None:
        """Apply the planned updates and record each in the audit trail (inside the import's
        transaction). Queries per updated item, none per unchanged one."""
        audit_rows = []
        items = {
            item.pk: item
            for chunk in in_chunks(update.item_id for update in updates)
            for item in Item.objects.filter(pk__in=chunk)
        }
        for update in updates:
            item, fields = items[update.item_id], dict(update.fields)
            if "prompt" in fields:
                prompt_key = fields["prompt"]
                fields["prompt"] = self._prompt(prompt_key, prompts) if prompt_key is not None else None
            for name, value in fields.items():
                setattr(item, name, value)
            item.save(update_fields=list(fields))
            audit_rows.append(
                self.audit.record(
                    study=self.study,
                    item=item,
                    action=ItemChangeAction.UPDATED,
                    changes={
                        name: {"old": old, "new": new} for name, (old, new) in update.report.changes.items()
                    },
                )
            )
        ItemChange.objects.bulk_create(audit_rows, batch_size=bulk_batch_size(ItemChange))

    def _stamps_write(self) -> None:
        """Store the new stamps of known files read again with the same bytes (no audit record:
        the item did not change, only what identifies its file)."""
        stamps = self.staging.rows("SELECT link, size, mtime_ns FROM stamps ORDER BY link")
        # bulk_update's CASE carries about 5 values per row (its id twice, the 2 values, the IN).
        for part in batches(stamps, max(1, in_chunk_size() // 5)):
            ItemImage.objects.bulk_update(
                [ItemImage(pk=pk, file_size=size, file_mtime_ns=mtime) for pk, size, mtime in part],
                ["file_size", "file_mtime_ns"],
            )

    def _prompt(
        self, prompt_key: tuple[str, str, str], prompts: dict[tuple[str, str, str], Prompt]
    ) -> Prompt:
        prompt = prompts.get(prompt_key)
        if prompt is None:
            category, word, text = prompt_key
            prompt = prompts[prompt_key] = Prompt.objects.create(
                study=self.study, category=category, word=word, text=text
            )
        return prompt

    def _accepted_groups(self) -> Iterator[tuple[str, list[tuple[_RowPlan, _FileCheck]]]]:
        """The accepted new items (not refused since), each with its fresh rows."""
        key: str | None = None
        rows: list[tuple[_RowPlan, _FileCheck]] = []
        # One-image items have one staged row each: file order is row order, no sort by item.
        order = (
            "ORDER BY p.number"
            if self.one_image
            else "JOIN (SELECT k, min(number) AS f FROM plans GROUP BY k) g ON g.k = p.k "
            "WHERE p.fresh = 1 ORDER BY g.f, p.number"
        )
        for k, data in self.staging.rows(
            "SELECT p.k, p.data FROM plans p JOIN accepted a ON a.k = p.k AND a.refused = 0 " + order
        ):
            if k != key and rows:
                yield cast(str, key), rows
                rows = []
            key = k
            rows.append(pickle.loads(data))
        if rows:
            yield cast(str, key), rows

    def _write(self, reports: list[ItemUpdate]) -> None:
        """Store the files of the good rows (most were stored by their check already), then
        write every new item and every update in one transaction. A dry run stops before
        anything is stored, counting what would be written.

        A file that cannot be stored (unreadable now, or changed since it was checked) refuses
        its row and its item, like any other bad row. The files this import stored that no
        Image row points to afterwards are removed by ``run``, whatever happened.
        """
        n_updates = self.staging.one("SELECT count(*) FROM updates")[0]
        has_stamps = self.staging.one("SELECT 1 FROM stamps") is not None
        if self.dry_run:
            self.summary.accepted += sum(len(rows) for _, rows in self._accepted_groups())
            self.summary.updated = reports
            return
        any_accepted = self.staging.one("SELECT 1 FROM accepted") is not None
        if not any_accepted and not n_updates and not has_stamps:
            return
        if any_accepted:
            self._files_store()
        if self.staging.one("SELECT 1 FROM accepted WHERE refused = 0") or n_updates or has_stamps:
            try:
                with transaction.atomic():
                    prompts = {
                        (p.category, p.word, p.text): p for p in Prompt.objects.filter(study=self.study)
                    }
                    chunks = batches(self._accepted_groups(), max(1, in_chunk_size() // 2))
                    for chunk in chunks if any_accepted else ():
                        self._rows_write(dict(chunk), prompts)
                    updates = (
                        pickle.loads(data)
                        for (data,) in self.staging.rows("SELECT data FROM updates ORDER BY k")
                    )
                    for part in batches(updates, import_batch_rows()):
                        self._updates_write(part, prompts)
                    self._stamps_write()
                self.committed = True
                self.summary.updated = reports
            except DatabaseError as exc:
                # Every value was checked above; this is the safety net for what the checks
                # did not foresee (or a concurrent writer): one clear message, nothing kept.
                self.summary.accepted = 0
                self.summary.updated = []
                raise ImportRejected(
                    f"the database refused the import ({exc.__class__.__name__}: {exc}); nothing was written"
                ) from exc

    def _files_store(self) -> None:
        """Store the files of the accepted items, a batch at a time in the thread pool; a file
        that fails refuses its item (its other rows named)."""
        failed: dict[str, str] = {}
        for batch in batches(
            ((plan, check) for _, rows in self._accepted_groups() for plan, check in rows),
            import_batch_rows(),
        ):
            # A file its check stored costs two ``stat`` calls, made here: handing each row to a
            # thread cost more than the calls (GIL hand-overs). Files to read again go to the
            # threads.
            quick = [self._stored_still(plan, check) for plan, check in batch]
            again = _map_chunked(
                self.store_pool,
                lambda row: self._store_file(*row),
                [row for row, problem in zip(batch, quick, strict=True) if problem is _READ_AGAIN],
            )
            problems = [next(again) if problem is _READ_AGAIN else problem for problem in quick]
            for (plan, _), problem in zip(batch, problems, strict=True):
                if problem is not None:
                    self.reject(plan.number, plan.path, problem)
                    failed.setdefault(plan.item_key, f"row {plan.number}")
            self._new_files_flush()
            self._advance("stored", len(batch))
        for key, where in failed.items():
            self.staging.db.execute("UPDATE accepted SET refused = 1 WHERE k = ?", (key,))
            refused = {r.row for r in self.summary.rejected}
            for (data,) in self.staging.rows("SELECT data FROM plans WHERE k = ? AND fresh = 1", key):
                plan, _ = pickle.loads(data)
                if plan.number not in refused:
                    self.reject(
                        plan.number,
                        plan.path,
                        f"item {key} has a refused row ({where}): the item is not imported",
                    )

    def _new_files_flush(self) -> None:
        """Move the names of the files this import created (by its threads, and by its worker
        processes: their journals, read on from where the last flush stopped) to the staging
        table of the clean-up."""
        with self.new_files_lock:
            names, self.new_files = self.new_files, []
        temporaries: list[tuple[str]] = []
        for entry in os.scandir(self.staging.folder):
            if entry.name.startswith(_JOURNAL_PREFIX):
                done = self.journals_read.get(entry.name, 0)
                with open(entry.path, "rb") as journal:
                    journal.seek(done)
                    tail = journal.read()
                whole = tail[: tail.rfind(b"\n") + 1]  # a line being written is read next time
                self.journals_read[entry.name] = done + len(whole)
                lines = [line.split("\t", 1) for line in whole.decode().splitlines()]
                names.extend(name for name, _ in lines)
                temporaries.extend((temporary,) for _, temporary in lines)
        self.staging.db.executemany("INSERT OR IGNORE INTO new_files VALUES (?)", [(n,) for n in names])
        self.staging.db.executemany("INSERT OR IGNORE INTO temporaries VALUES (?)", temporaries)

    def _orphans_remove(self) -> None:
        """Remove the files this import wrote that no Image row points to (after a refused item
        or a failed transaction). If the database cannot even be asked, every new file goes:
        no row of this import was committed then."""
        # After the write, the files of the rows it wrote are referenced: only the others are
        # asked about (a clean import of a million files asks nothing).
        names = (
            name
            for (name,) in self.staging.rows(
                "SELECT name FROM new_files WHERE name NOT IN (SELECT name FROM written)"
                if self.committed
                else "SELECT name FROM new_files"
            )
        )
        for chunk in batches(names, in_chunk_size()):
            try:
                referenced = set(Image.objects.filter(file__in=chunk).values_list("file", flat=True))
            except DatabaseError:
                referenced = set()
            for name in set(chunk) - referenced:
                (Path(settings.MEDIA_ROOT) / name).unlink(missing_ok=True)
        if not self.committed:
            # A worker process stopped mid-write (killed when another died, or the pool broke)
            # leaves its temporary file; one that finished has renamed it (nothing to remove).
            for (temporary,) in self.staging.rows("SELECT path FROM temporaries"):
                Path(temporary).unlink(missing_ok=True)

    def _file_new(self, name: str, temporary: str) -> None:
        """Record a file this import is about to create (from any thread), for the clean-up (a
        thread removes its own temporary file, whatever stops it)."""
        with self.new_files_lock:
            self.new_files.append(name)

    @staticmethod
    def _stored_still(plan: _RowPlan, check: _FileCheck) -> str | _ReadAgain | None:
        """For a file its check already stored: None when it need not be read again (its size
        and mtime are still those seen before it was read, it was not modified just before —
        see ``STAMP_MIN_AGE_NS`` — and the stored copy is still there), or the reason the row
        is refused; ``_READ_AGAIN`` for any other file (``_store_file``)."""
        if not check.stored or plan.file_size is None:
            return _READ_AGAIN
        try:
            now = os.stat(plan.file_path)
        except OSError as exc:
            return _rows_reason(exc)
        if (now.st_size, now.st_mtime_ns) != (plan.file_size, plan.file_mtime_ns):
            return "the file changed while it was being imported: import it again"
        if os.path.exists(os.path.join(settings.MEDIA_ROOT, storage_name(check.sha256, check.format))):
            return None
        return _READ_AGAIN

    def _store_file(self, plan: _RowPlan, check: _FileCheck) -> str | None:
        """Store a checked file (read again: the check kept no bytes); return None, or the reason
        the row is refused. A file that changed since it was checked is refused, never stored
        unchecked. Runs in worker threads; keeps no bytes."""
        try:
            data = read_limited(plan.file_path)
        except (DomainError, OSError) as exc:
            return _rows_reason(exc)
        if hashlib.sha256(data).hexdigest() != check.sha256:
            return "the file changed while it was being imported: import it again"
        validated = ValidatedImage(
            data=data, sha256=check.sha256, format=check.format, width=check.width, height=check.height
        )
        try:
            file_write(validated, before_write=self._file_new)
        except OSError as exc:
            return f"cannot store the file in MEDIA_ROOT: {exc.strerror or exc}"
        return None

    @staticmethod
    def _ids_of(rows: Any, column: str, values: list[str]) -> dict[str, int]:
        """``value -> id`` of the rows of the queryset ``rows`` whose ``column`` is one of
        ``values`` (no query when there are none)."""
        return {
            value: pk
            for chunk in in_chunks(values)
            for value, pk in rows.filter(**{f"{column}__in": chunk}).values_list(column, "pk")
        }

    def _rows_write(
        self,
        items: dict[str, list[tuple[_RowPlan, _FileCheck]]],
        prompts: dict[tuple[str, str, str], Prompt],
    ) -> None:
        """Write one chunk of accepted items: their new Image rows, items and image links."""
        checks = {check.sha256: check for rows in items.values() for _, check in rows}
        now = timezone.now()
        new_images = [
            (
                sha,
                storage_name(sha, check.format),
                check.width,
                check.height,
                check.format,
                now,
            )
            for sha, check in checks.items()
        ]
        # Multi-row INSERTs of plain values (``rows_insert``): a model instance per row cost
        # more than the database's work. Conflicts ignored: the bytes may be an image already
        # (of another study, or stored by another import a moment ago); those rows are looked
        # up, the usual new row's id comes back from the INSERT itself.
        images = dict(
            rows_insert_returning(
                Image,
                ("sha256", "file", "width", "height", "format", "created_at"),
                new_images,
                returning=("sha256", "id"),
                ignore_conflicts=True,
            )
        )
        images.update(
            self._ids_of(Image.objects.all(), "sha256", [sha for sha in checks if sha not in images])
        )
        self.staging.db.executemany(
            "INSERT OR IGNORE INTO written VALUES (?)", [(row[1],) for row in new_images]
        )
        # Items of a one-image manifest were new when their batch was checked; the others may
        # add a role to an item already there.
        existing = (
            {} if self.one_image else self._ids_of(Item.objects.filter(study=self.study), "key", list(items))
        )
        spec = protocol_spec(self.study.protocol)
        new_items: list[tuple[Any, ...]] = []
        new_keys: list[str] = []
        for key, rows in items.items():
            if key in existing:
                continue
            plans = [plan for plan, _ in rows]
            first = next((p for p in plans if p.role in (ImageRole.OUTPUT, ImageRole.IMAGE)), plans[0])
            prompt_key = next((p.prompt_key for p in plans if p.prompt_key), None)
            metadata: dict[str, str] = {}
            for p in plans:
                metadata.update(p.metadata)
            new_keys.append(key)
            new_items.append(
                (
                    self.study.pk,
                    key,
                    self._prompt(prompt_key, prompts).pk if prompt_key is not None else None,
                    next((p.t2i_model for p in plans if p.t2i_model), ""),
                    next((p.seed for p in plans if p.seed is not None), None),
                    next((p.index for p in plans if p.index is not None), None),
                    first.params,
                    metadata,
                    # A row's own questions win; without them the protocol decides from the metadata.
                    list(next((p.question_keys for p in plans if p.question_keys), ()))
                    or spec.item_question_keys(metadata),
                    spec.queue_default,
                    0,
                    now,
                )
            )
        by_key = existing | dict(
            rows_insert_returning(
                Item, _ITEM_COLUMNS, new_items, returning=("key", "id"), ignore_conflicts=True
            )
        )
        # An item another import created since its batch was checked: linked, as a known one.
        by_key |= self._ids_of(
            Item.objects.filter(study=self.study), "key", [k for k in new_keys if k not in by_key]
        )
        links = [
            (by_key[key], images[check.sha256], plan.role, plan.path, plan.file_size, plan.file_mtime_ns)
            for key, rows in items.items()
            for plan, check in rows
        ]
        rows_insert(
            ItemImage, ("item_id", "image_id", "role", "source_path", "file_size", "file_mtime_ns"), links
        )
        self.summary.accepted += len(links)
        self._advance("written", len(links))


def images_import(
    *,
    study: Study,
    manifest_path: str | os.PathLike[str],
    root: str | os.PathLike[str],
    user: Any = None,
    progress: Callable[[ImportSummary, int], None] | None = None,
    dry_run: bool = False,
    source: str = "",
    stage_progress: Callable[[str, int], None] | None = None,
) -> ImportSummary:
    """Import the good rows of a manifest CSV into ``study``; see the module docstring.

    Raises ``ImportRejected`` (nothing written) when the file lacks a required column or is not
    readable UTF-8 CSV, when ``root`` is not a folder, or when the database refuses the write.
    Row problems never stop the import: each rejected row is listed with its number and reason,
    and nothing of it is written (nor of its item). The good rows are written in one
    transaction — all of them or none — after which ``progress(summary, rows)`` is called once;
    if the write fails, the files it stored are removed again (no orphan in MEDIA_ROOT).
    Re-running the same import changes nothing (every row counts as a duplicate). A row of an
    item already imported with the same bytes whose other values changed (model, prompt,
    category, word, seed, index, params, metadata columns) updates the item, in the same
    transaction, with an ``ItemChange`` audit record naming ``user`` (or the shell user) and
    ``source``; the summary lists each updated item with its fields old → new. With
    ``dry_run`` every check runs and the summary says what would happen; nothing is written,
    no file stored.

    The manifest is streamed (``_ManifestImport``): memory holds one batch of rows whatever the
    file's size, and ``stage_progress(stage, rows)`` is called after each batch of each stage
    (``"checked"``, ``"stored"``, ``"written"``), for a progress line.
    """
    started = timezone.now()
    summary = ImportSummary(dry_run=dry_run, reports=("updated",))
    try:
        n_rows = _manifest_import(study, manifest_path, root, summary, user, source, stage_progress)
    except Exception as exc:
        import_record("images", summary, manifest_path, study, user, started, error=str(exc))
        raise
    import_record("images", summary, manifest_path, study, user, started)
    if progress:
        progress(summary, n_rows)
    return summary


def _manifest_import(
    study: Study,
    manifest_path: str | os.PathLike[str],
    root: str | os.PathLike[str],
    summary: ImportSummary,
    user: Any,
    source: str,
    stage_progress: Callable[[str, int], None] | None,
) -> int:
    root_path = Path(root)
    if not root_path.is_dir():
        raise ImportRejected(f"import root {root} is not a folder")
    required = (
        PAIR_MANIFEST_REQUIRED_COLUMNS if protocol_spec(study.protocol).paired else MANIFEST_REQUIRED_COLUMNS
    )
    header, rows = csv_rows_stream(manifest_path, required=required)
    manifest_import = _ManifestImport(
        study=study,
        root=root_path.resolve(),
        summary=summary,
        columns=header,
        dry_run=summary.dry_run,
        audit=Audit(user=user, source=source or f"import of {Path(manifest_path).name}"),
        stage_progress=stage_progress,
    )
    try:
        summary.rows = manifest_import.run(rows)
    finally:
        manifest_import.close()
    summary.rejected.sort(key=lambda r: r.row)
    return summary.rows


def study_get_or_create(
    *, slug: str, name: str | None = None, protocol: str = DEFAULT_PROTOCOL
) -> tuple[Study, bool]:
    """The study with this slug, created with ``protocol``'s preset questions when missing.

    Raises ``ImportRejected`` for a slug that is not letters, digits, '-' or '_'."""
    try:
        validate_slug(slug)
    except ValidationError as exc:
        raise ImportRejected(f"study slug {slug!r} must contain only letters, digits, '-' and '_'") from exc
    if len(slug) > 200:
        raise ImportRejected("a study slug must be at most 200 characters")
    existing = Study.objects.filter(slug=slug).first()
    if existing is not None:
        return existing, False
    return study_create(slug=slug, name=name, protocol=protocol), True


def study_for_import(slug: str) -> Study:
    """The existing study with this slug (without one, the only study), for a command that fills
    it. Imports never create a study — a typo would silently start a new one: an unknown slug
    raises ``StudyNotChosen`` listing the studies and naming ``create_study``
    (``studies.selectors.study_chosen``, what ``--study`` means in every command)."""
    return study_chosen(slug)


# --- Zip upload (admin) -------------------------------------------------------------------------

ZIP_MANIFEST_NAME = "manifest.csv"
ZIP_MAX_MEMBERS = 100_000


class ZipRejected(ImportRejected):
    """An uploaded zip is refused whole: not a zip, too large, unsafe member, no manifest."""


def images_import_zip(*, study: Study, zip_file: IO[bytes], user: Any = None) -> ImportSummary:
    """Import a zip holding one ``manifest.csv`` and the images it lists, by paths relative to
    the manifest's folder (layouts: ``studies.archive``).

    The whole zip is refused (``ZipRejected``, nothing written) when it is not a zip, is larger
    than ``settings.BIASLAB_MAX_UPLOAD_BYTES`` packed or unpacked, has a member with an absolute
    path, ``..``, a symlink or encryption, has no manifest or several, or cannot be unpacked.
    Otherwise it behaves exactly like ``images_import`` with the manifest's folder as root.
    """
    max_bytes = int(settings.BIASLAB_MAX_UPLOAD_BYTES)
    size = getattr(zip_file, "size", None)
    if size is not None and size > max_bytes:
        raise ZipRejected(f"the upload is {size} bytes, above the limit of {max_bytes}")
    try:
        archive = zipfile.ZipFile(zip_file)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ZipRejected(f"not a zip file ({exc})") from exc
    with archive, tempfile.TemporaryDirectory(prefix="biaslab-zip-") as folder:
        try:
            root = zip_extract(
                archive,
                Path(folder),
                manifest_name=ZIP_MANIFEST_NAME,
                max_bytes=max_bytes,
                max_members=ZIP_MAX_MEMBERS,
            )
        except ArchiveRejected as exc:
            raise ZipRejected(str(exc)) from exc
        summary = images_import(study=study, manifest_path=root / ZIP_MANIFEST_NAME, root=root, user=user)
    database_analyze()  # planner statistics for the rows just written, as the import commands do
    return summary
