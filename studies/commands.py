"""The flags BiasLab's management commands share, defined once so they agree: ``--study``, an
importer's ``FILE``, ``--format`` and ``--output`` (docs/reference/commands)."""

from __future__ import annotations

import os
from argparse import Action, ArgumentParser, _ActionsContainer
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar, cast

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from studies.csvio import atomic_file
from studies.database import database_analyze
from studies.errors import DomainError, StudyNotChosen
from studies.models import Study
from studies.progress import StageProgress, command_stream
from studies.selectors import study_chosen

#: The help of ``--study`` in every command that works on one study (what ``study_chosen`` does).
STUDY_HELP = "Study slug (default: the only study; required when there are several)."
#: The help of ``--study`` in a command that works across studies, where it is a filter.
STUDY_FILTER_HELP = "Only this study (default: every study)."

FormatKind = Literal["report", "rows"]
#: The choices of ``--format`` per kind of output, the default first.
FORMATS: dict[str, tuple[str, ...]] = {"report": ("json", "csv", "md"), "rows": ("csv", "json")}
FORMAT_HELP = {"report": "json (default), csv or md (Markdown tables).", "rows": "csv (default) or json."}
T = TypeVar("T")
OUTPUT_HELP = "File to write, replaced only once complete (default: standard output)."


class DomainCommand(BaseCommand):
    """A command whose ``DomainError`` ends it as a ``CommandError`` with the same message."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except DomainError as exc:
            raise CommandError(str(exc)) from exc


def add_study_argument(parser: ArgumentParser, *, every: bool = False, note: str = "") -> Action:
    """``--study SLUG``; ``every``: the command works across studies and reads it as a filter.
    ``note`` follows the shared help."""
    action = parser.add_argument(
        "--study",
        default="",
        metavar="SLUG",
        help=(STUDY_FILTER_HELP if every else STUDY_HELP) + (f" {note}" if note else ""),
    )
    action.study_rule = "every" if every else "one"  # type: ignore[attr-defined]
    return action


def study_from_options(options: Mapping[str, Any], key: str = "study") -> Study:
    """The study ``--study`` (or option ``key``) names; CommandError listing the studies otherwise."""
    try:
        return study_chosen(options[key])
    except StudyNotChosen as exc:
        raise CommandError(str(exc)) from None


def study_filter_from_options(options: Mapping[str, Any]) -> Study | None:
    """The study ``--study`` names, or None (every study) without one."""
    return study_from_options(options) if options["study"] else None


def add_file_argument(
    parser: _ActionsContainer, *, help: str, alias: str = "", optional: bool = False
) -> Action:
    """An importer's positional ``FILE``, with an old option spelling ``alias`` kept working;
    ``optional`` when the command can run without one."""
    action = parser.add_argument(
        "file", nargs="?" if optional or alias else None, default=None, metavar="FILE", help=help
    )
    action.importer_file = True  # type: ignore[attr-defined]  # read by tests/test_command_flags.py
    if alias:
        parser.add_argument(
            alias,
            dest="file_alias",
            metavar="FILE",
            help="The same as FILE (the spelling before; kept for scripts).",
        )
    return action


def file_from_options(options: Mapping[str, Any], *, alias: str = "") -> str | None:
    """The file given positionally or through its alias; CommandError when both differ."""
    file, aliased = options.get("file"), options.get("file_alias")
    if file and aliased and file != aliased:
        raise CommandError(
            f"give the file once: FILE {file!r} or {alias or 'its option'} {aliased!r}, not both"
        )
    return file or aliased or None


def add_format_argument(
    parser: ArgumentParser, kind: FormatKind, *, aliases: Mapping[str, str] | None = None
) -> Action:
    """``--format`` with the choices of its kind of output (``FORMATS``), the first the default."""
    extra = dict(aliases or {})
    help = FORMAT_HELP[kind] + "".join(f" Also {name}: {what}." for name, what in extra.items())
    action = parser.add_argument(
        "--format", choices=(*FORMATS[kind], *extra), default=FORMATS[kind][0], help=help
    )
    action.format_kind = kind  # type: ignore[attr-defined]  # read by tests/test_command_flags.py
    action.format_aliases = tuple(extra)  # type: ignore[attr-defined]
    return action


def add_output_argument(parser: ArgumentParser) -> Action:
    """``--output FILE``; write with ``output_write`` or ``output_stream``."""
    return parser.add_argument("--output", default="", metavar="FILE", help=OUTPUT_HELP)


@contextmanager
def output_stream(path: str, stdout: OutputWrapper) -> Iterator[TextIO]:
    """A text stream for the document: standard output, or a temporary file beside ``path``
    renamed over it when the block ends without error."""
    if not path:
        yield command_stream(stdout)
        return
    target = Path(path)
    if not target.parent.is_dir():
        raise CommandError(f"cannot write {path}: folder {target.parent} does not exist")
    try:
        with atomic_file(
            target, prefix=f".{target.name}.", suffix=".part", encoding="utf-8", newline=""
        ) as out:
            os.fchmod(out.fileno(), _mode_for(target))  # the mode a plain open() would give it
            yield cast(TextIO, out)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from exc


def output_write(text: str, path: str, stdout: OutputWrapper) -> None:
    """Write a whole document to ``path`` atomically (``output_stream``), or to standard output."""
    if not path:
        stdout.write(text, ending="")
        return
    with output_stream(path, stdout) as out:
        out.write(text)


def _mode_for(target: Path) -> int:
    """The mode of the file being replaced, or that of a new file under the process's umask."""
    try:
        return target.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def import_in_command(command: Any, run: Callable[[StageProgress], T], *, analyze: Sequence[Any] = ()) -> T:
    """Run an import for a command: ``run(meter)`` with a rows/s line on stderr every 10 s once it
    runs that long; a DomainError becomes a CommandError; then the written tables' planner
    statistics (``analyze``: these models; none: every table)."""
    meter = StageProgress(command_stream(command.stderr))
    try:
        result = run(meter)
    except DomainError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        meter.close()
    database_analyze(models=analyze, vacuum=True)
    return result
