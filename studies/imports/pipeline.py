"""The one loop every importer runs on (``import_run``): rows checked a batch at a time, the good
ones kept (``Spill``), all written in ONE transaction when none was refused, the run recorded.
See docs/explanation/imports.md."""

from __future__ import annotations

import contextlib
import getpass
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import DatabaseError, transaction
from django.utils import timezone

from studies.batching import batches, import_batch_rows
from studies.imports.rows import ImportSummary, RejectedRow
from studies.models import ImportRun, ImportStatus, Item, ItemChange, Study

P = TypeVar("P")  # a parsed row
G = TypeVar("G")  # a checked row, ready to write

# Checked rows held in memory between the passes; beyond, batches are pickled to a temporary file.
STAGED_IN_MEMORY_ROWS = 100_000
#: Refused rows an ``ImportRun`` keeps (the count is always whole).
RECORDED_REJECTED_ROWS = 1_000

Progress = Callable[[str, int], None]


class Spill:
    """Checked rows kept between the passes: in memory, beyond ``STAGED_IN_MEMORY_ROWS`` pickled to a file."""

    def __init__(self) -> None:
        self.held: list[list[Any]] = []
        self.rows = 0
        self.file: Any = None  # a temporary file once spilled; closed by close()

    def add(self, batch: list[Any]) -> None:
        if not batch:
            return
        self.rows += len(batch)
        if self.file is None and self.rows <= STAGED_IN_MEMORY_ROWS:
            self.held.append(batch)
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="biaslab-import-")  # noqa: SIM115 (close())
            for held in self.held:
                pickle.dump(held, self.file, protocol=pickle.HIGHEST_PROTOCOL)
            self.held = []
        pickle.dump(batch, self.file, protocol=pickle.HIGHEST_PROTOCOL)

    def batches(self) -> Iterator[list[Any]]:
        if self.file is None:
            yield from self.held
            return
        self.file.seek(0)
        while True:
            try:
                yield pickle.load(self.file)
            except EOFError:
                return

    def close(self) -> None:
        self.held = []
        if self.file is not None:
            self.file.close()


class Importer(Generic[P, G]):
    """What one kind of import says: ``parse_row`` (a row, a ``RejectedRow``, a list of both, or
    None: skipped), ``check_batch`` and ``write_batch``; ``import_run`` does the rest."""

    kind = ""
    #: False: a dry run stops after the checks; True: it writes, then rolls back.
    writes_in_dry_run = True
    #: False: one refused row refuses the file; True: the good rows are written (image manifests).
    keeps_good_rows = False

    def rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        raise NotImplementedError

    def parse_row(self, number: int, row: dict[str, str]) -> P | RejectedRow | list[Any] | None:
        raise NotImplementedError

    def check_batch(self, parsed: list[P], summary: ImportSummary) -> list[G]:
        raise NotImplementedError

    def check_end(self, summary: ImportSummary) -> None:
        """After the last batch is checked (file-wide checks; may reject rows or raise)."""

    def staged(self, spill: Spill) -> Iterator[list[G]]:
        """The checked rows to write, a batch at a time: by default those ``check_batch`` returned."""
        return spill.batches()

    def write_begin(self) -> None:
        """Inside the transaction, before the first batch is written."""

    def write_batch(self, good: list[G], summary: ImportSummary) -> None:
        raise NotImplementedError

    def write_end(self, summary: ImportSummary) -> None:
        """Inside the transaction, after the last batch, when no row was refused."""

    def write_refused(self, exc: DatabaseError) -> None:
        """The database refused the write (nothing kept); may raise another error to say so."""


class _Rollback(Exception):
    """A write refused a row: undo the whole file."""


class _DryRunDone(Exception):
    """The end of a dry run's transaction: undo its writes."""


def import_run(
    importer: Importer[Any, Any],
    *,
    summary: ImportSummary,
    source: str | os.PathLike[str],
    study: Study | None = None,
    user: Any = None,
    progress: Progress | None = None,
) -> ImportSummary:
    """Check every row of ``importer``'s file, then write every good row in one transaction, or
    nothing when a row is bad; a dry run rolls back. Records an ``ImportRun`` in every case."""
    started = timezone.now()
    spill = Spill()
    try:
        _check(importer, summary, spill, progress)
        if summary.rejected and not importer.keeps_good_rows:
            _refuse_all(summary)
        elif importer.writes_in_dry_run or not summary.dry_run:
            _write(importer, summary, spill, progress)
    except Exception as exc:
        import_record(importer.kind, summary, source, study, user, started, error=str(exc))
        raise
    finally:
        spill.close()
    summary.rejected.sort(key=lambda r: r.row)
    import_record(importer.kind, summary, source, study, user, started)
    return summary


def _check(
    importer: Importer[Any, Any], summary: ImportSummary, spill: Spill, progress: Progress | None
) -> None:
    rejected = summary.rejected
    parse = importer.parse_row
    for batch in batches(importer.rows(), import_batch_rows()):
        summary.rows += len(batch)
        parsed: list[Any] = []
        for number, row in batch:
            if "__error__" in row:
                rejected.append(RejectedRow(number, "", row["__error__"]))
                continue
            got = parse(number, row)
            if got is None:
                summary.skipped += 1
            elif type(got) is RejectedRow:
                rejected.append(got)
            elif type(got) is list:
                for one in got:
                    (rejected if type(one) is RejectedRow else parsed).append(one)
            else:
                parsed.append(got)
        good = importer.check_batch(parsed, summary)
        if importer.keeps_good_rows or not rejected:  # else nothing will be written: stop keeping rows
            spill.add(good)
        if progress:
            progress("checked", len(batch))
    importer.check_end(summary)


def _write(
    importer: Importer[Any, Any], summary: ImportSummary, spill: Spill, progress: Progress | None
) -> None:
    try:
        with transaction.atomic():
            importer.write_begin()
            for good in importer.staged(spill):
                importer.write_batch(good, summary)
                if progress:
                    progress("written", len(good))
            if summary.rejected and not importer.keeps_good_rows:
                raise _Rollback
            importer.write_end(summary)
            if summary.dry_run:
                raise _DryRunDone
    except _Rollback:
        _refuse_all(summary)
    except _DryRunDone:
        pass
    except DatabaseError as exc:
        importer.write_refused(exc)
        raise


def _refuse_all(summary: ImportSummary) -> None:
    """Nothing is written when any row is bad: say so in the summary."""
    summary.accepted = 0
    summary.duplicates = 0


def actor_name(user: Any) -> str:
    """Who acts: the account's username, or the shell user of a command."""
    if user is not None and getattr(user, "is_authenticated", False):
        return str(user.get_username())
    try:
        return f"shell user {getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "shell user (unknown)"


def import_record(
    kind: str,
    summary: ImportSummary,
    source: str | os.PathLike[str],
    study: Study | None,
    user: Any,
    started: Any,
    *,
    error: str = "",
) -> None:
    """Record one run as an ``ImportRun`` (``error``: why the whole file was refused)."""
    if error:
        status = ImportStatus.REFUSED
    elif summary.rejected:
        status = ImportStatus.REJECTED
    else:
        status = ImportStatus.DRY_RUN if summary.dry_run else ImportStatus.DONE
    counts = {
        "accepted": summary.accepted,
        "duplicates": summary.duplicates,
        "skipped": summary.skipped,
        "changed": summary.changed,
        "updated": len(summary.updated),
        "reopened": len(summary.reopened),
    }
    run = ImportRun(
        kind=kind,
        study=study if study is not None and study.pk else None,
        user=user if getattr(user, "is_authenticated", False) else None,
        actor=actor_name(user)[:200],
        file=str(source)[:1000],
        started_at=started,
        status=status,
        rows=summary.rows,
        counts=counts,
        rejected=len(summary.rejected),
        rejected_rows=[[r.row, r.path, r.reason] for r in summary.rejected[:RECORDED_REJECTED_ROWS]],
        error=error[:10_000],
    )
    # A database that broke the import may refuse the record too: the import's own error counts.
    with contextlib.suppress(DatabaseError), transaction.atomic():
        run.save()


@dataclass(frozen=True)
class Audit:
    """Who makes the changes of one import or removal, recorded on every ``ItemChange`` it writes."""

    user: Any
    source: str

    @property
    def actor(self) -> str:
        return actor_name(self.user)

    def record(
        self, *, study: Study, item: Item | None, key: str = "", action: str, changes: dict[str, Any]
    ) -> ItemChange:
        user = self.user if getattr(self.user, "is_authenticated", False) else None
        return ItemChange(
            study=study,
            item=item,
            item_key=item.key if item is not None else key,
            action=action,
            changes=changes,
            changed_by=user,
            actor=self.actor[:200],
            source=self.source[:1000],
        )
