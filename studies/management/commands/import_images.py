"""``manage.py import_images``: thin wrapper around ``studies.ingest.images_import``."""

from __future__ import annotations

import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from studies.commands import (
    DomainCommand,
    add_file_argument,
    add_study_argument,
    file_from_options,
    import_in_command,
)
from studies.imports import ImportSummary
from studies.ingest import MANIFEST_REQUIRED_COLUMNS, PAIR_MANIFEST_REQUIRED_COLUMNS, images_import
from studies.restore import items_restore
from studies.selectors import study_chosen


class Command(DomainCommand):
    help = (
        "Import images listed in a manifest CSV into a study. "
        f"Required columns: {', '.join(MANIFEST_REQUIRED_COLUMNS)} (pair-change studies: "
        f"{', '.join(PAIR_MANIFEST_REQUIRED_COLUMNS)}); optional: item (rows sharing it form one item), "
        "role (image, or input/output for pairs), seed, index, params (a JSON object), questions "
        "(the question keys the item asks, space-separated); any other column is kept as item metadata. "
        "'image' is a path relative to --root; paths leaving --root are refused. Every row is checked "
        "before anything is written; the good rows are written in one transaction (all or none: a "
        "failed write leaves no row and no file), bad rows are listed. Files are checked with Pillow, stored under "
        "their SHA-256 in MEDIA_ROOT and de-duplicated; re-running the same import changes nothing, "
        "and does not read again a file whose path, size and modification time are those of its "
        "import (the summary counts those rows, duplicates and updated items alike: 'rows whose file "
        "is unchanged since its import'). "
        "A row of an item already imported whose other values changed (t2i_model, prompt, category, "
        "word, seed, index, params, metadata columns) updates the item, with an audit record "
        "(admin: Item changes); a different image file for an existing row is refused (remove the "
        "item with remove_items first). Ends with a summary: accepted, updated (each item with its "
        "fields old → new), duplicates, rejected rows with their reasons (exit status 1 when a row "
        "was rejected). --dry-run prints the same summary and writes nothing; --restore brings back "
        "a remove_items backup (checked whole first: only its own rows, for the study's removed items; "
        "with --dry-run it is checked and nothing written)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_file_argument(
            parser,
            help="Manifest CSV file (UTF-8, header row); required unless --restore.",
            alias="--manifest",
            optional=True,
        )
        parser.add_argument("--root", help="Folder the manifest's image paths are relative to.")
        parser.add_argument(
            "--restore",
            metavar="BACKUP",
            help="Instead of a manifest: bring back the items a remove_items backup holds (their "
            "files, labels, final labels, predictions and sampling-round entries, with their ids).",
        )
        add_study_argument(
            parser,
            note="The study to import into must exist: create it first with create_study (an unknown "
            "slug is refused, never created).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Check every row and print what would be added and updated (with --restore: what "
            "would be restored); write nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        self.verbosity = int(options["verbosity"])
        manifest = file_from_options(options, alias="--manifest")
        if options["restore"]:
            if manifest or options["root"]:
                raise CommandError("--restore takes no manifest FILE or --root")
            self._restore(options["study"], options["restore"], dry_run=options["dry_run"])
            return
        if not manifest or not options["root"]:
            raise CommandError("give the manifest FILE and --root (or --restore BACKUP)")
        study = study_chosen(options["study"])
        summary = import_in_command(
            self,
            lambda meter: images_import(
                study=study,
                manifest_path=manifest,
                root=options["root"],
                progress=self._progress,
                dry_run=options["dry_run"],
                source=f"import_images {manifest}",
                stage_progress=meter,
            ),
        )
        seconds = time.perf_counter() - started
        if options["dry_run"]:
            self.stdout.write(f"Dry run on study '{study.slug}' ({seconds:.1f} s): nothing was written.")
        else:
            self.stdout.write(f"Import into study '{study.slug}' finished in {seconds:.1f} s")
        for line in summary.lines():
            self.stdout.write(line)
        if summary.rejected:
            raise CommandError(f"{len(summary.rejected)} row(s) rejected, see above.")

    def _restore(self, slug: str, backup: str, *, dry_run: bool) -> None:
        study = study_chosen(slug)
        source = f"import_images --restore {backup}"[:1000]
        result = items_restore(study=study, backup_path=backup, source=source, dry_run=dry_run)
        rows = ", ".join(f"{n} {name}" for name, n in result.rows.items())
        verb = "Would restore" if dry_run else "Restored"
        self.stdout.write(
            f"{verb} {len(result.keys)} item(s) into study '{study.slug}': {', '.join(result.keys)}"
        )
        self.stdout.write(f"  rows: {rows}; files: {result.files}")
        if dry_run:
            self.stdout.write("dry run: the backup passed every check; nothing was written")

    def _progress(self, summary: ImportSummary, rows_done: int) -> None:
        if self.verbosity >= 2:
            self.stderr.write(
                f"  {rows_done} rows read: {summary.accepted} accepted, {summary.duplicates} duplicates, "
                f"{len(summary.rejected)} rejected"
            )
