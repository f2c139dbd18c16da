"""A manifest import's second half (``ManifestStore``): files checked and stored by worker
threads or processes (journalled for the clean-up), items settled, the pipeline's write hooks."""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from studies.batching import (
    batches,
    bulk_batch_size,
    import_batch_rows,
    in_chunk_size,
    in_chunks,
    in_rows,
    rows_insert,
    rows_insert_returning,
)
from studies.errors import DomainError, ImportRejected
from studies.imports.images import ValidatedImage, file_write, image_facts, read_limited, storage_name
from studies.imports.manifest_rows import (
    READ_AGAIN,
    CheckedBatch,
    FileCheck,
    ItemUpdatePlan,
    KnownLink,
    ReadAgain,
    RowPlan,
    Staging,
    StoredItem,
    map_chunked,
    rows_reason,
)
from studies.imports.pipeline import Audit, Importer, Spill
from studies.imports.rows import ImportSummary, ItemUpdate, RejectedRow
from studies.models import Image, ImageRole, Item, ItemChange, ItemChangeAction, ItemImage, Prompt, Study
from studies.protocols import ProtocolSpec

ITEM_COLUMNS = (
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


def file_checked(path: str, *, known: bool, store: bool, file_new: Callable[[str, str], None]) -> FileCheck:
    """Read and hash one file; unless ``known`` validate it and, when ``store``, store it
    (``file_new`` told first). Runs in worker threads or processes."""
    try:
        data = read_limited(path)
        sha = hashlib.sha256(data).hexdigest()
        if known:
            return FileCheck(sha256=sha)
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
        return FileCheck(sha256=sha, format=fmt, width=width, height=height, stored=stored)
    except (DomainError, OSError) as exc:
        return FileCheck(error=exc)


# A worker process's journal: it names each file before creating it, for the import's clean-up.
_journal: int | None = None
JOURNAL_PREFIX = "new-files-"


def worker_start(journal_folder: str) -> None:
    global _journal
    _journal = os.open(
        os.path.join(journal_folder, f"{JOURNAL_PREFIX}{os.getpid()}"),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o600,
    )


def journal_write(name: str, temporary: str) -> None:
    assert _journal is not None  # set by worker_start
    # One append, never interleaved; a name holds no tab or newline.
    os.write(_journal, f"{name}\t{temporary}\n".encode())


def files_checked(tasks: list[tuple[str, bool, bool]]) -> list[FileCheck]:
    """``file_checked`` of each ``(path, known, store)``, in a worker process."""
    return [
        file_checked(path, known=known, store=store, file_new=journal_write) for path, known, store in tasks
    ]


def worker_died() -> ImportRejected:
    return ImportRejected(
        "a worker process checking the image files stopped abruptly (killed, out of memory, or "
        "crashed on a file); nothing was written. Importing again with BIASLAB_IMPORT_PROCESSES=0 "
        "checks the files in the import's own process"
    )


# Threads reading, hashing and decoding files (all release the GIL), and storing them.
IMPORT_WORKERS = min(8, os.cpu_count() or 1)
STORE_WORKERS = max(IMPORT_WORKERS, 8)

#: A row to write: its item's key, its plan and its file's check.
StagedRow = tuple[str, RowPlan, FileCheck]


class ManifestStore(Importer[RowPlan, StagedRow]):
    """A manifest import's state and its writing half (``_ManifestImport`` checks the rows)."""

    # Set by ``rows()`` once the manifest's header is read.
    columns: set[str]
    metadata_columns: list[str]
    one_image: bool
    spec: ProtocolSpec
    pairs: bool

    def __init__(
        self,
        *,
        study: Study,
        manifest_path: str | os.PathLike[str],
        root: str | os.PathLike[str],
        summary: ImportSummary,
        audit: Audit,
        stage_progress: Callable[[str, int], None] | None = None,
    ) -> None:
        self.study = study
        self.manifest_path = manifest_path
        self.given_root = root
        self.summary = summary
        self.dry_run = summary.dry_run
        self.audit = audit
        self.stage_progress = stage_progress
        # What the database holds for the batch being checked, loaded per batch.
        self.known: dict[tuple[str, str], KnownLink] = {}
        self.known_items: dict[str, StoredItem] = {}
        self.folders: dict[str, str] = {}
        self.single_by_hash: dict[str, str] = {}
        self.stamps: list[tuple[int, int, int | None]] = []
        self.settled_reports: list[ItemUpdate] = []
        self.reports: list[ItemUpdate] = []
        self.pending: CheckedBatch | None = None
        self.prompts: dict[tuple[str, str, str], Prompt] | None = None
        self.staging = Staging()
        # Once the write committed, the files named in ``written`` are in use.
        self.committed = False
        self.new_files: list[str] = []
        self.new_files_lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=IMPORT_WORKERS, thread_name_prefix="image-import")
        self.store_pool = ThreadPoolExecutor(max_workers=STORE_WORKERS, thread_name_prefix="image-store")
        self.processes: ProcessPoolExecutor | None = None
        self.journals_read: dict[str, int] = {}

    def reject(self, number: int, path: str, reason: str) -> None:
        self.summary.rejected.append(RejectedRow(number, path, reason))

    def _groups(self) -> Iterator[tuple[str, list[tuple[bool, RowPlan, FileCheck]]]]:
        """The staged rows item by item, in file order of each item's first row."""
        staged = self.staging.rows(
            "SELECT p.k, p.fresh, p.data FROM plans p JOIN (SELECT k, min(number) AS f FROM plans GROUP BY k) "
            "g ON g.k = p.k ORDER BY g.f, p.number"
        )
        for key, rows in groupby(staged, key=itemgetter(0)):
            yield key, [(bool(fresh), *pickle.loads(data)) for _, fresh, data in rows]

    def _items_settle(self) -> list[ItemUpdate]:
        """Settle every staged item: refused whole when a row is bad, its rows disagree or a role
        is missing; else accepted, an update or a duplicate. Returns the updates' reports."""
        reports: list[ItemUpdate] = list(self.settled_reports)
        if self.one_image:  # settled batch by batch (``_one_image_items_settle``)
            return reports
        for chunk in batches(self._groups(), in_chunk_size()):
            keys = [key for key, _ in chunk]
            bad_items = self._bad_items(keys)
            roles: dict[str, set[str]] = {}
            if self.pairs:
                for key, role in ItemImage.objects.filter(
                    item__study=self.study, item__key__in=keys
                ).values_list("item__key", "role"):
                    roles.setdefault(key, set()).add(role)
            same_keys = [key for key, rows in chunk if any(not fresh for fresh, _, _ in rows)]
            stored = {item.key: item for item in StoredItem.values(self.study, same_keys)}
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
                item = stored.get(key) if same and key not in bad_items and not new_item else None
                self._update_stage(key, same, item, staged_updates, reports)
            self.staging.db.executemany("INSERT INTO accepted (k) VALUES (?)", accepted)
            self.staging.db.executemany("INSERT INTO updates VALUES (?, ?)", staged_updates)
        return reports

    def _bad_items(self, keys: list[str]) -> dict[str, int]:
        """The first refused row of each of ``keys`` that has one."""
        return dict(
            row
            for part in in_chunks(keys)
            for row in self.staging.db.execute(
                f"SELECT k, first FROM bad_items WHERE k IN ({','.join('?' * len(part))})", part
            )
        )

    def _update_stage(
        self,
        key: str,
        plans: list[RowPlan],
        item: StoredItem | None,
        staged: list[tuple[str, bytes]],
        reports: list[ItemUpdate],
    ) -> None:
        """Stage what ``plans`` change of the stored ``item`` (None: nothing to compare); rows that
        change nothing count as duplicates."""
        update, refused = self._update_plan(key, plans, item) if item is not None else (None, False)
        if update is not None:
            staged.append((key, pickle.dumps(update)))
            reports.append(update.report)
        elif not refused:
            self.summary.duplicates += len(plans)

    def _item_problem(self, key: str, plans: list[RowPlan], stored_roles: set[str]) -> str | None:
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
        self, key: str, plans: list[RowPlan], item: StoredItem
    ) -> tuple[ItemUpdatePlan | None, bool]:
        """``(update, refused)`` for an item already stored with the same bytes: what its rows
        change in the manifest's own columns, or None."""
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
            ("t2i_model", "t2i_model", item.t2i_model, next((p.t2i_model for p in plans if p.t2i_model), "")),
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
        # Metadata decides the questions only of items whose questions it decided at their import.
        derived = item.question_keys == self.spec.item_question_keys(item.metadata)
        if "questions" in self.columns or ("metadata" in fields and derived):
            question_keys = explicit or self.spec.item_question_keys(fields.get("metadata", item.metadata))
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
        return ItemUpdatePlan(item_id=item.pk, fields=fields, report=ItemUpdate(key, changes)), False

    def _updates_write(self, updates: list[ItemUpdatePlan]) -> None:
        """Apply the planned updates, each with an ``ItemChange`` audit row."""
        audit_rows = []
        items = {
            item.pk: item for item in in_rows(Item.objects, "pk", (update.item_id for update in updates))
        }
        for update in updates:
            item, fields = items[update.item_id], dict(update.fields)
            if "prompt" in fields:
                prompt_key = fields["prompt"]
                fields["prompt"] = self._prompt(prompt_key) if prompt_key is not None else None
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
        """Store the new size/mtime stamps of known files read again with the same bytes."""
        stamps = self.staging.rows("SELECT link, size, mtime_ns FROM stamps ORDER BY link")
        # bulk_update's CASE carries about 5 values per row.
        for part in batches(stamps, max(1, in_chunk_size() // 5)):
            ItemImage.objects.bulk_update(
                [ItemImage(pk=pk, file_size=size, file_mtime_ns=mtime) for pk, size, mtime in part],
                ["file_size", "file_mtime_ns"],
            )

    def _prompt(self, prompt_key: tuple[str, str, str]) -> Prompt:
        """The study's prompt of this (category, word, text), created when missing."""
        if self.prompts is None:
            self.prompts = {(p.category, p.word, p.text): p for p in Prompt.objects.filter(study=self.study)}
        prompt = self.prompts.get(prompt_key)
        if prompt is None:
            category, word, text = prompt_key
            prompt = self.prompts[prompt_key] = Prompt.objects.create(
                study=self.study, category=category, word=word, text=text
            )
        return prompt

    def _accepted_groups(self) -> Iterator[tuple[str, list[tuple[RowPlan, FileCheck]]]]:
        """The accepted new items (not refused since), each with its fresh rows."""
        order = (
            "ORDER BY p.number"
            if self.one_image
            else "JOIN (SELECT k, min(number) AS f FROM plans GROUP BY k) g ON g.k = p.k "
            "WHERE p.fresh = 1 ORDER BY g.f, p.number"
        )
        accepted = self.staging.rows(
            "SELECT p.k, p.data FROM plans p JOIN accepted a ON a.k = p.k AND a.refused = 0 " + order
        )
        for key, rows in groupby(accepted, key=itemgetter(0)):
            yield key, [pickle.loads(data) for _, data in rows]

    def staged(self, spill: Spill) -> Iterator[list[StagedRow]]:
        """The accepted items' rows to write, whole items per batch."""
        for chunk in batches(self._accepted_groups(), max(1, in_chunk_size() // 2)):
            yield [(key, plan, check) for key, rows in chunk for plan, check in rows]

    def write_end(self, summary: ImportSummary) -> None:
        """Apply the staged updates and stamps."""
        updates = (pickle.loads(data) for (data,) in self.staging.rows("SELECT data FROM updates ORDER BY k"))
        for part in batches(updates, import_batch_rows()):
            self._updates_write(part)
        self._stamps_write()
        summary.updated = self.reports

    def write_refused(self, exc: DatabaseError) -> None:
        """A safety net for what the checks did not foresee (or a concurrent writer): nothing kept."""
        self.summary.accepted = 0
        self.summary.updated = []
        raise ImportRejected(
            f"the database refused the import ({exc.__class__.__name__}: {exc}); nothing was written"
        ) from exc

    def _files_store(self) -> None:
        """Store the accepted items' files on the thread pool; a file that fails refuses its item."""
        failed: dict[str, str] = {}
        for batch in batches(
            ((plan, check) for _, rows in self._accepted_groups() for plan, check in rows),
            import_batch_rows(),
        ):
            # A file its check stored costs two ``stat`` calls here, cheaper than a thread hand-over.
            quick = [self._stored_still(plan, check) for plan, check in batch]
            again = map_chunked(
                self.store_pool,
                lambda row: self._store_file(*row),
                [row for row, problem in zip(batch, quick, strict=True) if problem is READ_AGAIN],
            )
            problems = [next(again) if problem is READ_AGAIN else problem for problem in quick]
            for (plan, _), problem in zip(batch, problems, strict=True):
                if problem is not None:
                    self.reject(plan.number, plan.path, problem)
                    failed.setdefault(plan.item_key, f"row {plan.number}")
            self._new_files_flush()
            if self.stage_progress is not None:
                self.stage_progress("stored", len(batch))
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
        """Move the names of the files this import created (threads, and worker processes'
        journals) to the clean-up's staging table."""
        with self.new_files_lock:
            names, self.new_files = self.new_files, []
        temporaries: list[tuple[str]] = []
        for entry in os.scandir(self.staging.folder):
            if entry.name.startswith(JOURNAL_PREFIX):
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
        """Remove the files this import wrote that no Image row points to."""
        # After a commit only the files of rows not written are asked about.
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
            # A worker process stopped mid-write leaves its temporary file.
            for (temporary,) in self.staging.rows("SELECT path FROM temporaries"):
                Path(temporary).unlink(missing_ok=True)

    def _file_new(self, name: str, temporary: str) -> None:
        """Record a file this import is about to create (any thread), for the clean-up."""
        with self.new_files_lock:
            self.new_files.append(name)

    @staticmethod
    def _stored_still(plan: RowPlan, check: FileCheck) -> str | ReadAgain | None:
        """For a file its check stored: None when it need not be read again, the reason the row
        is refused, or ``READ_AGAIN``."""
        if not check.stored or plan.file_size is None:
            return READ_AGAIN
        try:
            now = os.stat(plan.file_path)
        except OSError as exc:
            return rows_reason(exc)
        if (now.st_size, now.st_mtime_ns) != (plan.file_size, plan.file_mtime_ns):
            return "the file changed while it was being imported: import it again"
        if os.path.exists(os.path.join(settings.MEDIA_ROOT, storage_name(check.sha256, check.format))):
            return None
        return READ_AGAIN

    def _store_file(self, plan: RowPlan, check: FileCheck) -> str | None:
        """Store a checked file, read again; None, or why the row is refused (a file that changed
        is never stored unchecked). Runs in worker threads."""
        try:
            data = read_limited(plan.file_path)
        except (DomainError, OSError) as exc:
            return rows_reason(exc)
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

    def write_batch(self, good: list[StagedRow], summary: ImportSummary) -> None:
        """Write one chunk of accepted items (their rows in order): new Image rows, items, image links."""
        checks = {check.sha256: check for _, _, check in good}
        now = timezone.now()
        new_images = [
            (sha, storage_name(sha, check.format), check.width, check.height, check.format, now)
            for sha, check in checks.items()
        ]
        # Conflicts ignored: the bytes may already be an image (another study, a concurrent import).
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
            in_rows(Image.objects, "sha256", [sha for sha in checks if sha not in images], "sha256", "pk")
        )
        self.staging.db.executemany(
            "INSERT OR IGNORE INTO written VALUES (?)", [(row[1],) for row in new_images]
        )
        items = {key: [plan for _, plan, _ in rows] for key, rows in groupby(good, key=itemgetter(0))}
        ours = Item.objects.filter(study=self.study)
        existing = {} if self.one_image else dict(in_rows(ours, "key", items, "key", "pk"))
        new_items: list[tuple[Any, ...]] = []
        new_keys: list[str] = []
        for key, plans in items.items():
            if key in existing:
                continue
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
                    self._prompt(prompt_key).pk if prompt_key is not None else None,
                    next((p.t2i_model for p in plans if p.t2i_model), ""),
                    next((p.seed for p in plans if p.seed is not None), None),
                    next((p.index for p in plans if p.index is not None), None),
                    first.params,
                    metadata,
                    list(next((p.question_keys for p in plans if p.question_keys), ()))
                    or self.spec.item_question_keys(metadata),
                    self.spec.queue_default,
                    0,
                    now,
                )
            )
        by_key = existing | dict(
            rows_insert_returning(
                Item, ITEM_COLUMNS, new_items, returning=("key", "id"), ignore_conflicts=True
            )
        )
        # An item another import created since its batch was checked: linked, as a known one.
        by_key |= in_rows(ours, "key", [k for k in new_keys if k not in by_key], "key", "pk")
        links = [
            (by_key[key], images[check.sha256], plan.role, plan.path, plan.file_size, plan.file_mtime_ns)
            for key, plan, check in good
        ]
        rows_insert(
            ItemImage, ("item_id", "image_id", "role", "source_path", "file_size", "file_mtime_ns"), links
        )
        self.summary.accepted += len(links)
