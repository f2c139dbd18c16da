"""``manage.py remove_items``: thin wrapper around ``studies.removal.items_remove``."""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from studies.commands import DomainCommand, add_file_argument, add_study_argument, file_from_options
from studies.imports import csv_rows_stream
from studies.removal import items_remove, items_resolve
from studies.selectors import study_chosen


class Command(DomainCommand):
    help = (
        "Remove items from a study: the items a manifest lists (FILE: its 'item' column, or "
        "'image' for one-image items) or named one by one (--item KEY …; id:N names the item whose "
        "id is N). Items "
        "with no labels go at once; items with labels, final labels, predictions or sampling "
        "rounds are refused, each named with what it holds, unless --with-labels: then "
        "everything removed is first written to a JSON backup (--backup, or a file named after "
        "the study and the time) that `import_images --study S --restore FILE` brings back. "
        "Image files no item uses any more leave MEDIA_ROOT. One transaction: all or nothing."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_study_argument(parser)
        which = parser.add_mutually_exclusive_group(required=True)
        add_file_argument(
            which, help="Manifest CSV listing the items to remove (as imported).", alias="--manifest"
        )
        which.add_argument(
            "--item", nargs="+", metavar="KEY", help="Item keys to remove; id:N for the item whose id is N."
        )
        parser.add_argument(
            "--with-labels",
            action="store_true",
            help="Also remove items that have labels, predictions or sampling rounds (backed up first).",
        )
        parser.add_argument(
            "--backup",
            help="Backup file to write (default: var/backups/removed-<study>-<time>.json, in the data "
            "folder beside the SQLite database).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be removed; remove and write nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_chosen(options["study"])
        manifest = file_from_options(options, alias="--manifest")
        if options["item"]:
            keys, ids = self._named(options["item"])
        else:
            keys, ids = self._manifest_keys(manifest or ""), []
        items = items_resolve(study=study, keys=keys, ids=ids)
        backup = None
        if options["backup"]:
            backup = Path(options["backup"])
        elif options["with_labels"]:
            stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
            backup = Path(settings.VAR_DIR) / "backups" / f"removed-{study.slug}-{stamp}.json"
        source = f"remove_items {manifest or ' '.join(options['item'])}"
        result = items_remove(
            study=study,
            items=items,
            with_labels=options["with_labels"],
            backup_path=backup.resolve() if backup else None,
            source=source[:1000],
            dry_run=options["dry_run"],
        )
        verb = "Would remove" if result.dry_run else "Removed"
        self.stdout.write(
            f"{verb} {len(result.keys)} item(s) from study '{study.slug}': {', '.join(result.keys)}"
        )
        if result.removed:
            self.stdout.write(
                "  with them: " + ", ".join(f"{n} {name}" for name, n in result.removed.items())
            )
        self.stdout.write(
            f"  files {'to leave' if result.dry_run else 'removed from'} MEDIA_ROOT: {len(result.files)}"
        )
        if result.backup is not None:
            self.stdout.write(f"Backup written to {result.backup}")
            self.stdout.write(
                f"  bring them back with: manage.py import_images --study {study.slug} --restore {result.backup}"
            )
        if result.dry_run:
            self.stdout.write("dry run: nothing was removed")

    @staticmethod
    def _named(values: list[str]) -> tuple[list[str], list[int]]:
        """``--item`` values: item keys, and ``id:N`` for the item whose id is N."""
        keys, ids = [], []
        for value in values:
            number = value[3:] if value.startswith("id:") else None
            if number is None:
                keys.append(value)
            elif number.isascii() and number.isdigit():
                ids.append(int(number))
            else:
                raise CommandError(f"--item {value}: an id is written id:N, N a number")
        return keys, ids

    @staticmethod
    def _manifest_keys(path: str) -> list[str]:
        """The item keys a manifest names: its ``item`` column, else its ``image`` paths."""
        header, stream = csv_rows_stream(path, required=())

        def refused(problem: str) -> CommandError:
            return CommandError(f"{Path(path).name}: {problem}; nothing was removed")

        column = "item" if "item" in header else "image"
        if column not in header:
            raise refused(f"no 'item' or 'image' column (found: {', '.join(header) or 'no header'})")
        keys = []
        for number, row in stream:
            if "__error__" in row:
                raise refused(f"row {number}: {row['__error__']}")
            if not row.get(column):
                raise refused(f"row {number}: empty '{column}'")
            if "\x00" in row[column]:
                raise refused(
                    f"row {number}: the '{column}' value contains a NUL character (\\u0000), which no "
                    "item key holds"
                )
            keys.append(row[column])
        if not keys:
            raise refused("no rows")
        return keys
