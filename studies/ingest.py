"""A manifest CSV into a study (``images_import``, the admin's zip upload) on the import
pipeline: every row checked and staged, then the good items' files stored and written in ONE
transaction. How: docs/explanation/imports.md#image-manifests."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import stat
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db.models import F

from studies.archive import MANIFEST_NAME, ZipRejected, zip_extract
from studies.batching import IsIn, batches, in_chunks, in_rows
from studies.database import database_analyze
from studies.errors import DomainError, ImportRejected
from studies.imports.manifest_rows import (
    MAX_CHARS,
    POOL_CHUNK_ROWS,
    STAMP_MIN_AGE_NS,
    CheckedBatch,
    DuplicateImage,
    DuplicateManifestRow,
    FileCheck,
    ImagePathConflict,
    InvalidManifestRow,
    KnownLink,
    RowPlan,
    StoredItem,
    changed_file_message,
    manifest_path_resolve,
    map_chunked,
    optional_int,
    row_params,
    rows_reason,
    text_problems,
)
from studies.imports.manifest_store import (
    ManifestStore,
    file_checked,
    files_checked,
    worker_died,
    worker_start,
)
from studies.imports.pipeline import Audit, import_run
from studies.imports.rows import ImportSummary, RejectedRow, csv_rows_stream
from studies.models import ImageRole, ItemImage, Question, Study
from studies.protocols import protocol_spec
from studies.services import MANIFEST_KNOWN_COLUMNS, study_create

# A pair-change study's rows name their item and role instead of a prompt.
MANIFEST_REQUIRED_COLUMNS = ("image", "t2i_model", "prompt", "category", "word")
PAIR_MANIFEST_REQUIRED_COLUMNS = ("image", "item", "role")

# From this many files a batch goes to worker processes, not threads (figures: docs/benchmarks.md).
PROCESS_MIN_FILES = 500


def import_processes() -> int:
    """Worker processes of a big image import (``BIASLAB_IMPORT_PROCESSES``, default one per
    CPU up to 8); 0 or 1: threads only. Linux only (forked workers)."""
    if not sys.platform.startswith("linux"):
        return 0
    return max(0, int(getattr(settings, "BIASLAB_IMPORT_PROCESSES", min(8, os.cpu_count() or 1))))


class _ManifestImport(ManifestStore):
    """A manifest on the import pipeline: rows planned, their files checked by worker threads or
    processes (two batches in flight) and staged; then the good items' files stored and written."""

    kind = "images"
    writes_in_dry_run = False
    keeps_good_rows = True

    def rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        """The manifest's rows, once its root and header are checked and the study's facts read."""
        if not Path(self.given_root).is_dir():
            raise ImportRejected(f"import root {self.given_root} is not a folder")
        self.root = Path(self.given_root).resolve()
        self.spec = protocol_spec(self.study.protocol)
        self.pairs = self.spec.paired
        required = PAIR_MANIFEST_REQUIRED_COLUMNS if self.pairs else MANIFEST_REQUIRED_COLUMNS
        header, rows = csv_rows_stream(self.manifest_path, required=required)
        self.columns = set(header)
        self.has_item_column = "item" in header
        # Without an ``item`` column every row is its own one-image item, settled within its batch.
        self.one_image = not self.has_item_column
        self.metadata_columns = [c for c in header if c not in MANIFEST_KNOWN_COLUMNS]
        self.roles = set(self.spec.image_roles)
        self.question_keys = set(Question.objects.filter(study=self.study).values_list("key", flat=True))
        return rows

    def close(self) -> None:
        """Stop the workers, remove the files stored that no Image row uses, drop the staging."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.store_pool.shutdown(wait=True, cancel_futures=True)
        self._processes_stop()
        self._new_files_flush()
        self._orphans_remove()
        self.staging.close()

    def _bad_item(self, key: str, number: int) -> None:
        """Mark an item refused by its row ``number``, keeping its first refused row."""
        self.staging.db.execute(
            "INSERT INTO bad_items VALUES (?, ?) "
            "ON CONFLICT (k) DO UPDATE SET first = excluded.first WHERE excluded.first < bad_items.first",
            (key, number),
        )

    def parse_row(self, number: int, row: dict[str, str]) -> RowPlan | RejectedRow:
        try:
            return self.row_plan(number, row)
        except (DomainError, OSError) as exc:
            key = row.get("item", "") if self.has_item_column else row.get("image", "")
            if key and not isinstance(exc, DuplicateManifestRow):
                self._bad_item(key, number)
            return RejectedRow(number, row.get("image", ""), rows_reason(exc))

    def check_batch(self, parsed: list[RowPlan], summary: ImportSummary) -> list[Any]:
        """Start the batch's file checks, then settle the batch before (two in flight: the
        workers check one while the pipeline parses the next). Staged here, so nothing to keep."""
        started = self._batch_start(parsed)
        if self.pending is not None:
            self._batch_finish(self.pending)
        self.pending = started
        return []

    def check_end(self, summary: ImportSummary) -> None:
        """Settle the last batch and every item; store the good items' files (not in a dry run)."""
        if self.pending is not None:
            self._batch_finish(self.pending)
        self._processes_stop()
        self.reports = self._items_settle()
        if self.dry_run:
            summary.accepted += sum(len(rows) for _, rows in self._accepted_groups())
            summary.updated = self.reports
        elif self.staging.one("SELECT 1 FROM accepted") is not None:
            self._files_store()

    def row_plan(self, number: int, row: dict[str, str]) -> RowPlan:
        """Check a row's values and path; raises the row's rejection naming every problem."""
        path = row.get("image", "")
        problems = text_problems(row)
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
            path_key = f"{role}\x00{item_key}"
            if not self.staging.db.execute(
                "INSERT OR IGNORE INTO paths VALUES (?, ?)", (path_key, number)
            ).rowcount:
                seen = self.staging.one("SELECT number FROM paths WHERE k = ?", path_key)
                what = "image path" if not self.has_item_column else f"item and role ({role})"
                raise DuplicateManifestRow(f"duplicate row: same {what} as row {seen[0]}")
        if not self.pairs:
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
        for name, parse in (("seed", optional_int), ("index", optional_int), ("params", row_params)):
            try:
                values[name] = parse(row, name)
            except InvalidManifestRow as exc:
                problems.append(str(exc))
        metadata = {c: row[c] for c in self.metadata_columns if row.get(c, "") != ""}
        problem = self.spec.row_problem(row, metadata, self.study.parameters)
        if problem:  # the protocol's own check (e.g. GEP: gender woman|man; the compared column)
            problems.append(problem)
        file_path, file_stat = None, None
        if "\x00" not in path and len(path) <= MAX_CHARS["image"]:  # else already named above
            try:
                file_path, file_stat = self._file_resolve(path)
            except (DomainError, OSError) as exc:
                problems.append(rows_reason(exc))
        if problems or file_path is None or file_stat is None:
            raise InvalidManifestRow("; ".join(problems))
        stamped = file_stat.st_mtime_ns <= time.time_ns() - STAMP_MIN_AGE_NS
        return RowPlan(
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
        """The file a manifest path names and its ``stat``: one cached folder lookup and an
        ``lstat`` for a plain file, else ``manifest_path_resolve``."""
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

    def file_check(self, job: tuple[RowPlan, bool]) -> FileCheck:
        """Read, hash and validate one row's file (``file_checked``). Runs in worker threads."""
        plan, known = job
        return file_checked(plan.file_path, known=known, store=not self.dry_run, file_new=self._file_new)

    def _files_read(
        self, plans: list[RowPlan], known: Mapping[tuple[str, str], KnownLink]
    ) -> Iterator[FileCheck]:
        """The file check of each plan, in order: on worker processes for a batch of at least
        ``PROCESS_MIN_FILES`` files, else on threads; answered as the iterator is read."""
        processes = import_processes()
        if processes < 2 or len(plans) < PROCESS_MIN_FILES:
            return map_chunked(
                self.pool, self.file_check, [(plan, (plan.item_key, plan.role) in known) for plan in plans]
            )
        if self.processes is None:
            # Forked, so the children inherit the settings; stopped when the check pass ends.
            self.processes = ProcessPoolExecutor(
                max_workers=processes,
                mp_context=multiprocessing.get_context("fork"),
                initializer=worker_start,
                initargs=(self.staging.folder,),
            )
        store = not self.dry_run
        try:
            tasks = self.processes.map(
                files_checked,
                (
                    [(plan.file_path, (plan.item_key, plan.role) in known, store) for plan in part]
                    for part in batches(plans, POOL_CHUNK_ROWS)
                ),
            )
        except BrokenProcessPool as exc:  # a worker died while the batch before was checked
            raise worker_died() from exc

        def checks() -> Iterator[FileCheck]:
            try:
                for part in tasks:
                    yield from part
            except BrokenProcessPool as exc:
                raise worker_died() from exc

        return checks()

    def _processes_stop(self) -> None:
        """Stop the worker processes and wait for them (no file created after this)."""
        if self.processes is not None:
            self.processes.shutdown(wait=True, cancel_futures=True)
            self.processes = None

    def row_settle(self, plan: RowPlan, check: FileCheck) -> bool:
        """Decide a row in file order: True when it is new, False when already imported."""
        if check.error is not None:
            raise check.error
        sha = check.sha256
        known = self.known.get((plan.item_key, plan.role))
        # A row already imported with these bytes is not entered: the database's copy refuses its twins.
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
                # Same bytes read again: store the new stamp so the next re-run need not read it.
                self.stamps.append((known.pk, plan.file_size, plan.file_mtime_ns))
            return False
        if known is not None:
            raise ImagePathConflict(changed_file_message(self.study, plan.item_key, known.sha256))
        if plan.role == ImageRole.IMAGE and sha in self.single_by_hash:
            raise DuplicateImage(f"same image content as {self.single_by_hash[sha]}, already in the study")
        return True

    def _batch_start(self, plans: list[RowPlan]) -> CheckedBatch:
        """Read what the database holds for a batch's rows and start their file checks."""
        known, known_items = self._known_load(plans)
        known_checks: list[FileCheck | None] = [
            FileCheck(sha256=link.sha256, unchanged=True)
            if (link := known.get((plan.item_key, plan.role))) is not None and link.same_file(plan)
            else None
            for plan in plans
        ]
        to_read = [plan for plan, check in zip(plans, known_checks, strict=True) if check is None]
        return CheckedBatch(
            plans=plans,
            known=known,
            known_items=known_items,
            known_checks=known_checks,
            read=self._files_read(to_read, known),
        )

    def _batch_finish(self, started: CheckedBatch) -> None:
        """Settle a started batch's rows in file order and stage the good ones."""
        plans = started.plans
        self.known, self.known_items = started.known, started.known_items
        read = started.read
        checks = [check if check is not None else next(read) for check in started.known_checks]
        read_hashes = (c.sha256 for c in checks if c.error is None and not c.unchanged)
        singles = ItemImage.objects.filter(item__study=self.study, role=ImageRole.IMAGE)
        self.single_by_hash = dict(
            in_rows(singles, "image__sha256", read_hashes, "image__sha256", "item__key")
        )
        staged = []
        new_keys: list[str] = []
        known_plans: list[RowPlan] = []
        for plan, check in zip(plans, checks, strict=True):
            try:
                fresh = self.row_settle(plan, check)
            except (DomainError, OSError) as exc:
                self.reject(plan.number, plan.path, rows_reason(exc))
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

    def _known_load(
        self, plans: list[RowPlan]
    ) -> tuple[dict[tuple[str, str], KnownLink], dict[str, StoredItem]]:
        """The batch's stored image links and (one-image manifests) their items, in one query."""
        link_fields = (
            "pk",
            "item__key",
            "role",
            "image__sha256",
            "source_path",
            "file_size",
            "file_mtime_ns",
        )
        item_fields = tuple(f"item__{name}" for name in StoredItem.FIELDS) if self.one_image else ()
        known: dict[tuple[str, str], KnownLink] = {}
        known_items: dict[str, StoredItem] = {}
        for chunk in in_chunks(plan.item_key for plan in plans):
            for row in ItemImage.objects.filter(
                IsIn(F("item__key"), chunk), item__study=self.study
            ).values_list(*link_fields, *item_fields):
                pk, key, role, sha, source_path, size, mtime_ns = row[: len(link_fields)]
                known[(key, role)] = KnownLink(pk, sha, source_path, size, mtime_ns)
                if item_fields:
                    known_items[key] = StoredItem.from_row(row[len(link_fields) :])
        return known, known_items

    def _one_image_items_settle(self, new_keys: list[str], known_plans: list[RowPlan]) -> None:
        """Settle the batch's one-image items now: new ones accepted, known ones staged only when
        the row changes them, else counted as duplicates."""
        bad = self._bad_items(new_keys + [plan.item_key for plan in known_plans])
        self.staging.db.executemany(
            "INSERT INTO accepted (k) VALUES (?)", [(key,) for key in new_keys if key not in bad]
        )
        staged_updates: list[tuple[str, bytes]] = []
        for plan in known_plans:
            item = None if plan.item_key in bad else self.known_items.get(plan.item_key)
            self._update_stage(plan.item_key, [plan], item, staged_updates, self.settled_reports)
        self.staging.db.executemany("INSERT INTO updates VALUES (?, ?)", staged_updates)


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
    recorded_file: str = "",
) -> ImportSummary:
    """Import the good rows of a manifest CSV into ``study``; the summary lists refused rows and
    updated items. ``ImportRejected``: nothing written. ``progress`` once at the end,
    ``stage_progress(stage, rows)`` per batch."""
    summary = ImportSummary(dry_run=dry_run, reports=("updated",))
    manifest_import = _ManifestImport(
        study=study,
        manifest_path=manifest_path,
        root=root,
        summary=summary,
        audit=Audit(user=user, source=source or f"import of {Path(manifest_path).name}"),
        stage_progress=stage_progress,
    )
    try:
        import_run(
            manifest_import,
            summary=summary,
            source=recorded_file or str(manifest_path),
            study=study,
            user=user,
            progress=stage_progress,
        )
        manifest_import.committed = True
    finally:
        manifest_import.close()
    if progress:
        progress(summary, summary.rows)
    return summary


def study_get_or_create(*, slug: str, protocol: str, name: str | None = None) -> tuple[Study, bool]:
    """The study with this slug, created with ``protocol``'s preset when missing;
    ``ImportRejected`` for a bad slug."""
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


def images_import_zip(*, study: Study, zip_file: IO[bytes], user: Any = None) -> ImportSummary:
    """Import a zip of one ``manifest.csv`` and its images as ``images_import``; a bad zip is
    refused whole (``ZipRejected``)."""
    max_bytes = int(settings.BIASLAB_MAX_UPLOAD_BYTES)
    size = getattr(zip_file, "size", None)
    if size is not None and size > max_bytes:
        raise ZipRejected(f"the upload is {size} bytes, above the limit of {max_bytes}")
    try:
        archive = zipfile.ZipFile(zip_file)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ZipRejected(f"not a zip file ({exc})") from exc
    with archive, tempfile.TemporaryDirectory(prefix="biaslab-zip-") as folder:
        root = zip_extract(archive, Path(folder), max_bytes=max_bytes)
        name = getattr(zip_file, "name", "") or "zip upload"
        summary = images_import(
            study=study, manifest_path=root / MANIFEST_NAME, root=root, user=user, recorded_file=name
        )
    database_analyze()  # planner statistics for the rows just written, as the import commands do
    return summary
