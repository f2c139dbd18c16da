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
written in ONE transaction. Bad rows are listed by number with the reason and written nowhere; an
item with one bad row is refused whole. If the transaction fails, the files this import stored
and no row points to are removed again.

Every image is opened with Pillow from the allow-list ``settings.BIASLAB_IMAGE_FORMATS``, its
pixel count is checked from the header before anything is decoded (decompression bombs), then
``verify()`` and a full decode catch corrupt and truncated files. Files are stored as
``MEDIA_ROOT/images/<sha[:2]>/<sha>.<ext>``, once whatever the number of items and studies
using them.
"""

from __future__ import annotations

import csv
import getpass
import hashlib
import io
import os
import tempfile
import threading
import warnings
import zipfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import DatabaseError, transaction
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from studies.archive import ArchiveRejected, zip_extract
from studies.csvio import read_cell
from studies.errors import DomainError, ImportRejected
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
from studies.protocols import protocol_spec
from studies.selectors import study_by_slug
from studies.services import study_create

# Storage extension per Pillow format name; a format missing here is stored under its lower name.
_EXTENSIONS = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tif"}

# Files bigger than this are refused before being read into memory (a PNG of the maximum pixel
# count is far smaller); overridable from settings for unusual studies.
DEFAULT_MAX_IMAGE_BYTES = 256 * 1024**2

# The study imports go to when no --study is given.
DEFAULT_STUDY = "default"

# Generated-image studies need the prompt columns; a pair-change study's rows name their item
# and role instead (seed photos have no prompt).
MANIFEST_REQUIRED_COLUMNS = ("image", "t2i_model", "prompt", "category", "word")
PAIR_MANIFEST_REQUIRED_COLUMNS = ("image", "item", "role")
MANIFEST_KNOWN_COLUMNS = (
    "image",
    "item",
    "role",
    "t2i_model",
    "prompt",
    "category",
    "word",
    "seed",
    "index",
    "params",
    "questions",
)

# Field sizes of the tables the rows go to: a longer value is a row error, not a database crash.
_MAX_CHARS = {"image": 1000, "item": 1000, "t2i_model": 200, "category": 100, "word": 200}
_MAX_INDEX = 2_147_483_647  # PositiveIntegerField's ceiling on every backend
# Threads reading, hashing and decoding files (all release the GIL); the database work stays
# on the calling thread.
IMPORT_WORKERS = min(8, os.cpu_count() or 1)


# --- Domain errors ------------------------------------------------------------------------------


class ImageRejected(DomainError):
    """The file cannot be used as an image of a study; the subclass says why."""


class EmptyImageFile(ImageRejected):
    """The file has 0 bytes."""


class NotAnImage(ImageRejected):
    """Pillow cannot identify the bytes as any allowed image format (e.g. a text file named .png)."""


class ImageFormatNotAllowed(ImageRejected):
    """The bytes are an image, but of a format outside ``settings.BIASLAB_IMAGE_FORMATS``."""


class ImageTooLarge(ImageRejected):
    """More pixels than ``settings.BIASLAB_MAX_IMAGE_PIXELS`` (decompression bomb) or too many bytes."""


class CorruptImage(ImageRejected):
    """The header is fine but the data is damaged or truncated."""


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


@dataclass(frozen=True)
class ValidatedImage:
    """An image file that passed every check, with what is needed to store it."""

    data: bytes
    sha256: str
    format: str
    width: int
    height: int

    @property
    def extension(self) -> str:
        return _EXTENSIONS.get(self.format, self.format.lower())

    @property
    def storage_name(self) -> str:
        return f"images/{self.sha256[:2]}/{self.sha256}.{self.extension}"


def _max_image_bytes() -> int:
    return int(getattr(settings, "BIASLAB_MAX_IMAGE_BYTES", DEFAULT_MAX_IMAGE_BYTES))


def _read_limited(path_or_file: str | os.PathLike[str] | IO[bytes] | bytes) -> bytes:
    limit = _max_image_bytes()
    if isinstance(path_or_file, bytes):
        data = path_or_file
    elif isinstance(path_or_file, str | os.PathLike):
        with open(path_or_file, "rb") as fh:
            data = fh.read(limit + 1)
    else:
        data = path_or_file.read(limit + 1)
    if len(data) > limit:
        raise ImageTooLarge(f"file is larger than {limit} bytes")
    return data


def _format_guess(data: bytes) -> str | None:
    """Name the format of bytes Pillow refused under the allow-list, only to word the error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with PILImage.open(io.BytesIO(data)) as probe:
                return probe.format
    except Exception:  # any failure simply means "not an image we can name"
        return None


def allowed_formats() -> list[str]:
    """Pillow format ids from ``settings.BIASLAB_IMAGE_FORMATS`` ("JPG" read as "JPEG").

    Names Pillow does not know are dropped: an unknown name must not turn every image into a
    crash; with none left, every file is refused as not an image.
    """
    PILImage.init()
    names = [name.strip().upper() for name in settings.BIASLAB_IMAGE_FORMATS]
    names = ["JPEG" if name == "JPG" else name for name in names]
    return [name for name in dict.fromkeys(names) if name in PILImage.OPEN]


def image_file_validate(path_or_file: str | os.PathLike[str] | IO[bytes] | bytes) -> ValidatedImage:
    """Check that a file (path, binary file object or bytes) is a sound image we may store.

    Raises ``EmptyImageFile``, ``NotAnImage``, ``ImageFormatNotAllowed``, ``ImageTooLarge`` or
    ``CorruptImage`` (all ``ImageRejected``). The pixel bound is checked from the header, before
    any pixel is decoded.
    """
    data = _read_limited(path_or_file)
    if not data:
        raise EmptyImageFile("empty file (0 bytes)")
    allowed = allowed_formats()
    max_pixels = int(settings.BIASLAB_MAX_IMAGE_PIXELS)
    with warnings.catch_warnings():
        # Pillow's own bomb guard warns (or raises) at its global limit; ours is the study's.
        warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
        try:
            with PILImage.open(io.BytesIO(data), formats=allowed) as img:
                fmt, (width, height) = img.format or "", img.size
                if width * height > max_pixels:
                    raise ImageTooLarge(
                        f"image is {width}x{height} = {width * height} pixels, above the limit of "
                        f"{max_pixels} (decompression bomb guard)"
                    )
                img.verify()
            # verify() leaves the image unusable; a full decode on a fresh handle finds truncation.
            with PILImage.open(io.BytesIO(data), formats=allowed) as img:
                img.load()
        except PILImage.DecompressionBombError as exc:
            # Pillow refuses before it reports the size: say our limit, not Pillow's.
            raise ImageTooLarge(
                f"image has more than twice Pillow's own safety limit of pixels, far above the limit "
                f"of {max_pixels} (decompression bomb guard)"
            ) from exc
        except UnidentifiedImageError as exc:
            guessed = _format_guess(data)
            if guessed:
                raise ImageFormatNotAllowed(
                    f"format {guessed} is not allowed (allowed: {', '.join(allowed)})"
                ) from exc
            raise NotAnImage(f"not an image: Pillow cannot identify it as {', '.join(allowed)}") from exc
        except ImageRejected:
            raise
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise CorruptImage(f"corrupt or truncated image: {exc}") from exc
    return ValidatedImage(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        format=fmt,
        width=width,
        height=height,
    )


def _file_write(validated: ValidatedImage) -> str:
    """Write the bytes under their content-hash name (atomic rename); return the storage name."""
    name = validated.storage_name
    target = Path(settings.MEDIA_ROOT) / name
    if target.exists() and target.stat().st_size == len(validated.data):
        return name
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".incoming-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(validated.data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return name


# --- Single-image services ----------------------------------------------------------------------


def prompt_get_or_create(*, study: Study, category: str, word: str, text: str) -> Prompt:
    """The study's prompt with this category, word and text, created if missing."""
    prompt, _ = Prompt.objects.get_or_create(study=study, category=category, word=word, text=text)
    return prompt


def image_file_get_or_create(validated: ValidatedImage) -> Image:
    """The Image row of these bytes, storing the file and creating the row when new. The same
    bytes are one row and one file, whatever the number of items and studies using them."""
    existing = Image.objects.filter(sha256=validated.sha256).first()
    if existing is not None:
        return existing
    name = _file_write(validated)
    image, _ = Image.objects.get_or_create(
        sha256=validated.sha256,
        defaults={
            "file": name,
            "width": validated.width,
            "height": validated.height,
            "format": validated.format,
        },
    )
    return image


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
    """An existing item whose metadata a re-import changed: ``changes`` maps each changed field
    to its (old, new) values."""

    key: str
    changes: dict[str, tuple[Any, Any]]

    def __str__(self) -> str:
        shown = "; ".join(f"{name} {old!r} → {new!r}" for name, (old, new) in self.changes.items())
        return f"{self.key}: {shown}"


@dataclass
class ImportSummary:
    """What an import did: rows accepted (new), duplicates (already there, unchanged), rejected
    rows; image imports add the items whose metadata changed (``updated``), label imports the
    labels whose answer changed (``changed``) and the items whose agreed final answer went back
    to disputed (``reopened``). A dry run's summary says what the import would do."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[RejectedRow] = field(default_factory=list)
    skipped: int = 0
    updated: list[ItemUpdate] = field(default_factory=list)
    changed: int = 0
    reopened: list[str] = field(default_factory=list)
    dry_run: bool = False
    # Which of the optional counts this kind of import reports (always, even when 0).
    reports: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.rejected

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
        if self.skipped:
            out.append(f"skipped (nothing to import): {self.skipped}")
        out.append(f"rejected: {len(self.rejected)}")
        out.extend(f"  {line}" for line in rejected_lines(self.rejected))
        if self.dry_run:
            out.append("dry run: nothing was written")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "skipped": self.skipped,
            "updated": [
                {"item": u.key, "changes": {k: {"old": o, "new": n} for k, (o, n) in u.changes.items()}}
                for u in self.updated
            ],
            "changed": self.changed,
            "reopened": list(self.reopened),
            "dry_run": self.dry_run,
            "rejected": [{"row": r.row, "path": r.path, "reason": r.reason} for r in self.rejected],
        }


#: Rows named in full under one reason; beyond this, the reason is given once with the count.
REJECTED_SHOWN_PER_REASON = 5


def rejected_lines(rejected: list[RejectedRow]) -> list[str]:
    """The rejected rows as lines, grouped by reason in the order each reason first appears: a
    reason shared by a few rows lists them, one shared by more says how many and names the
    first ones ("276 rows: file not found … — first 5: row 2 (a.png), …"), so one missing
    folder does not bury the other problems under 276 identical lines."""
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


def csv_rows_read(
    csv_path: str | os.PathLike[str], *, required: Iterable[str]
) -> list[tuple[int, dict[str, str]]]:
    """Read a UTF-8 CSV (BOM tolerated) into ``(row_number, row)`` pairs; the header is row 1.

    Raises ``ImportRejected`` naming every missing required column, or when the file is not
    readable CSV; the whole file is refused in both cases.
    """
    reader: csv.DictReader[str] | None = None
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [name.strip() for name in (reader.fieldnames or [])]
            if any("\x00" in name for name in header):
                raise ImportRejected(f"{Path(csv_path).name}: the header row contains a NUL character")
            missing = [name for name in required if name not in header]
            if missing:
                raise ImportRejected(
                    f"{Path(csv_path).name}: missing required column(s): {', '.join(missing)} "
                    f"(found: {', '.join(header) or 'no header'}; required: {', '.join(required)})"
                )
            reader.fieldnames = header
            rows = []
            for number, raw in enumerate(reader, start=2):
                if raw.get(None):
                    # csv puts cells beyond the header under the key None
                    rows.append((number, {"__error__": "more cells than header columns"}))
                    continue
                rows.append((number, {k: read_cell(v) for k, v in raw.items() if k is not None}))
            return rows
    except UnicodeDecodeError as exc:
        line = _line_of_byte(csv_path)
        raise ImportRejected(
            f"{Path(csv_path).name}: not UTF-8 text near line {line} ({exc.reason}); save the file as UTF-8"
        ) from exc
    except csv.Error as exc:
        # e.g. a field beyond csv's size limit (128 KiB): no row of such a file is trusted.
        # line_num counts the lines read before the failing one.
        where = f" near line {reader.line_num + 1}" if reader is not None else ""
        raise ImportRejected(f"{Path(csv_path).name}: not a readable CSV file{where} ({exc})") from exc
    except FileNotFoundError as exc:
        raise ImportRejected(f"{csv_path}: file not found") from exc
    except OSError as exc:
        # A folder, an unreadable file: name it instead of a traceback.
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
    file_path: Path
    item_key: str
    role: str
    t2i_model: str
    prompt_key: tuple[str, str, str] | None
    seed: int | None
    index: int | None
    params: dict[str, Any]
    metadata: dict[str, str]
    question_keys: tuple[str, ...]


@dataclass(frozen=True)
class _FileCheck:
    """What reading a row's file found: its hash and validated facts, or the error. The bytes
    are not kept: 6,000 photos would not fit in memory; the write step reads them again."""

    sha256: str = ""
    format: str = ""
    width: int = 0
    height: int = 0
    error: Exception | None = None


@dataclass(frozen=True)
class _ItemUpdatePlan:
    """An existing item and the field values a re-import gives it (``prompt``: a prompt key)."""

    item: Item
    fields: dict[str, Any]
    report: ItemUpdate


@dataclass(frozen=True)
class _Audit:
    """Who makes the changes of one import or removal, and with what: recorded on every
    ``ItemChange`` it writes. Without an account (a command), the shell user is named."""

    user: Any
    source: str

    @property
    def actor(self) -> str:
        if self.user is not None and getattr(self.user, "is_authenticated", False):
            return str(self.user.get_username())
        try:
            return f"shell user {getpass.getuser()}"
        except (KeyError, OSError):  # no passwd entry (some containers)
            return "shell user (unknown)"

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


def _changed_file_message(study: Study, key: str, stored_sha: str) -> str:
    """Why a row naming an existing item with other bytes is refused, and the way out."""
    return (
        f"{key} was already imported with different content (sha256 {stored_sha[:12]}…); an item's "
        f"image cannot be replaced by a re-import: remove the item first with "
        f"`manage.py remove_items --study {study.slug} --item {key}` (add --with-labels if it has "
        "labels), then import it again"
    )


def _rows_reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, DomainError):
        return f"cannot read file: {exc.strerror or exc}"
    return str(exc)


class _ManifestImport:
    """One manifest import: check every row (values, then files in a thread pool — Pillow,
    hashlib and file I/O release the GIL), settle rows and items in file order (so messages such
    as "same content as row 3" never depend on thread timing), then store the files of the good
    rows and write them in one transaction."""

    def __init__(
        self,
        *,
        study: Study,
        root: Path,
        summary: ImportSummary,
        columns: list[str],
        dry_run: bool = False,
        audit: _Audit | None = None,
    ) -> None:
        self.study = study
        self.root = root
        self.summary = summary
        self.dry_run = dry_run
        self.audit = audit or _Audit(user=None, source="")
        self.columns = set(columns)
        self.has_item_column = "item" in columns
        self.metadata_columns = [c for c in columns if c not in MANIFEST_KNOWN_COLUMNS]
        self.roles = set(protocol_spec(study.protocol).image_roles)
        self.question_keys = set(Question.objects.filter(study=study).values_list("key", flat=True))
        self.pairs = study.protocol == "pair_change"
        # Loaded once, so per-row checks never touch the database (6,000 rows < 1 minute).
        self.known: dict[tuple[str, str], str] = {
            (key, role): sha
            for key, role, sha in ItemImage.objects.filter(item__study=study).values_list(
                "item__key", "role", "image__sha256"
            )
        }
        self.single_by_hash: dict[str, str] = {
            sha: key for (key, role), sha in self.known.items() if role == ImageRole.IMAGE
        }
        self.seen_paths: dict[tuple[str, str], int] = {}
        self.seen_hashes: dict[str, tuple[int, str]] = {}
        # Storage names of the files this import wrote (from worker threads), for the clean-up.
        self.new_files: list[str] = []
        self.new_files_lock = threading.Lock()

    def reject(self, number: int, path: str, reason: str) -> None:
        self.summary.rejected.append(RejectedRow(number, path, reason))

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
        if item_key and role in self.roles and (item_key, role) in self.seen_paths:
            what = "image path" if not self.has_item_column else f"item and role ({role})"
            raise DuplicateManifestRow(
                f"duplicate row: same {what} as row {self.seen_paths[(item_key, role)]}"
            )
        if item_key and role in self.roles:
            self.seen_paths[(item_key, role)] = number
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
        problem = protocol_spec(self.study.protocol).row_problem(row, metadata, self.study.parameters)
        if problem:  # the protocol's own check (e.g. GEP: gender woman|man; the compared column)
            problems.append(problem)
        file_path = None
        if "\x00" not in path and len(path) <= _MAX_CHARS["image"]:  # else already named above
            try:
                file_path = manifest_path_resolve(self.root, path)
            except (DomainError, OSError) as exc:
                problems.append(_rows_reason(exc))
        if problems or file_path is None:
            # One error per row, every problem in it: a file is fixed in one round, not one
            # column per run.
            raise InvalidManifestRow("; ".join(problems))
        return _RowPlan(
            number=number,
            path=path,
            file_path=file_path,
            item_key=item_key,
            role=role,
            t2i_model=row.get("t2i_model", ""),
            prompt_key=prompt_key,
            seed=values["seed"],
            index=values["index"],
            params=values["params"],
            metadata=metadata,
            question_keys=questions,
        )

    def file_check(self, plan: _RowPlan) -> _FileCheck:
        """Read, hash and validate one file. Runs in worker threads: reads shared state only."""
        try:
            data = _read_limited(plan.file_path)
            sha = hashlib.sha256(data).hexdigest()
            if (plan.item_key, plan.role) in self.known:
                # Already imported (same bytes: validated then) or a conflict: no decoding.
                return _FileCheck(sha256=sha)
            validated = image_file_validate(data)
            return _FileCheck(
                sha256=sha, format=validated.format, width=validated.width, height=validated.height
            )
        except (DomainError, OSError) as exc:
            return _FileCheck(error=exc)

    def row_settle(self, plan: _RowPlan, check: _FileCheck) -> bool:
        """Decide a row in file order: True when it is new, False when already imported."""
        if check.error is not None:
            raise check.error
        sha = check.sha256
        if plan.role == ImageRole.IMAGE:
            if sha in self.seen_hashes:
                other_row, other_path = self.seen_hashes[sha]
                raise DuplicateImage(f"duplicate row: same image content as row {other_row} ({other_path})")
            self.seen_hashes[sha] = (plan.number, plan.path)
        known = self.known.get((plan.item_key, plan.role))
        if known == sha:
            return False
        if known is not None:
            raise ImagePathConflict(_changed_file_message(self.study, plan.item_key, known))
        if plan.role == ImageRole.IMAGE and sha in self.single_by_hash:
            raise DuplicateImage(f"same image content as {self.single_by_hash[sha]}, already in the study")
        return True

    def run(self, rows: list[tuple[int, dict[str, str]]]) -> None:
        plans: list[_RowPlan] = []
        # Items with a refused row, and the first such row: the whole item is refused.
        bad_items: dict[str, str] = {}
        for number, row in rows:
            try:
                plans.append(self.row_plan(number, row))
            except (DomainError, OSError) as exc:
                self.reject(number, row.get("image", ""), _rows_reason(exc))
                key = row.get("item", "") if self.has_item_column else row.get("image", "")
                if key and not isinstance(exc, DuplicateManifestRow):
                    # A repeated row is refused alone: the item of its first row stays good.
                    bad_items.setdefault(key, f"row {number}")
        with ThreadPoolExecutor(max_workers=IMPORT_WORKERS, thread_name_prefix="image-import") as pool:
            checks = list(pool.map(self.file_check, plans))
        fresh: list[tuple[_RowPlan, _FileCheck]] = []
        same: list[_RowPlan] = []
        for plan, check in zip(plans, checks, strict=True):
            try:
                if self.row_settle(plan, check):
                    fresh.append((plan, check))
                else:
                    same.append(plan)
            except (DomainError, OSError) as exc:
                self.reject(plan.number, plan.path, _rows_reason(exc))
                bad_items.setdefault(plan.item_key, f"row {plan.number}")
        items = self._group(fresh, bad_items)
        updates = self._updates_plan(same, bad_items, new_keys=set(items))
        updated_keys = {update.item.key for update in updates}
        refused = {rejected.row for rejected in self.summary.rejected}
        self.summary.duplicates += sum(
            1 for plan in same if plan.item_key not in updated_keys and plan.number not in refused
        )
        self._write(items, updates)

    def _group(
        self, fresh: list[tuple[_RowPlan, _FileCheck]], bad_items: dict[str, str]
    ) -> dict[str, list[tuple[_RowPlan, _FileCheck]]]:
        """New rows by item; an item with a refused row, with conflicting item fields, or (pair
        studies) lacking a role is refused whole, each of its rows named."""
        items: dict[str, list[tuple[_RowPlan, _FileCheck]]] = {}
        for plan, check in fresh:
            items.setdefault(plan.item_key, []).append((plan, check))
        for key, rows in list(items.items()):
            reason = None
            if key in bad_items:
                reason = f"item {key} has a refused row ({bad_items[key]}): the item is not imported"
            else:
                reason = self._item_problem(key, [plan for plan, _ in rows])
            if reason:
                for plan, _ in rows:
                    self.reject(plan.number, plan.path, reason)
                del items[key]
        return items

    def _item_problem(self, key: str, plans: list[_RowPlan]) -> str | None:
        for field_name in ("t2i_model", "prompt_key", "seed", "index"):
            values = {getattr(p, field_name) for p in plans if getattr(p, field_name) not in ("", None)}
            if len(values) > 1:
                return f"item {key}: its rows disagree on {field_name.replace('_key', '')}"
        if self.pairs:
            roles = {p.role for p in plans} | {role for (k, role) in self.known if k == key}
            missing = [r for r in (ImageRole.INPUT, ImageRole.OUTPUT) if r not in roles]
            if missing:
                return f"pair item {key} has no {missing[0]} image (a pair needs its seed photo and its edit)"
        return None

    def _updates_plan(
        self, same: list[_RowPlan], bad_items: dict[str, str], *, new_keys: set[str]
    ) -> list[_ItemUpdatePlan]:
        """The already imported items (same key, same bytes) whose rows now say something else
        about them: model, prompt (category, word, text), seed, index, params, metadata columns.

        Only the columns the manifest has are compared: a manifest without ``params`` leaves
        the stored params alone, and a metadata column it lacks is kept. An item with a refused
        row is left unchanged. Changing which questions an item asks is refused once it has
        labels (it would change what the labels answer). One query, whatever the row count.
        """
        by_key: dict[str, list[_RowPlan]] = {}
        for plan in same:
            if plan.item_key not in bad_items and plan.item_key not in new_keys:
                by_key.setdefault(plan.item_key, []).append(plan)
        if not by_key:
            return []
        stored = {
            item.key: item
            for item in Item.objects.filter(study=self.study).select_related("prompt")
            if item.key in by_key
        }
        spec = protocol_spec(self.study.protocol)
        metadata_columns = set(self.metadata_columns)
        updates: list[_ItemUpdatePlan] = []
        for key, plans in by_key.items():
            item = stored.get(key)
            if item is None:  # removed by someone else meanwhile: nothing to update
                continue
            problem = self._item_problem(key, plans)
            if problem:
                for p in plans:
                    self.reject(p.number, p.path, problem)
                continue
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
            old_prompt = item.prompt
            old_key = (old_prompt.category, old_prompt.word, old_prompt.text) if old_prompt else None
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
                        continue
                    changes["questions"] = (item.question_keys, question_keys)
                    fields["question_keys"] = question_keys
            if changes:
                updates.append(_ItemUpdatePlan(item=item, fields=fields, report=ItemUpdate(key, changes)))
        return updates

    def _updates_write(self, updates: list[_ItemUpdatePlan]) -> None:
        """Apply the planned updates and record each in the audit trail (inside the import's
        transaction). Queries per updated item, none per unchanged one."""
        prompts = {(p.category, p.word, p.text): p for p in Prompt.objects.filter(study=self.study)}
        audit_rows = []
        for update in updates:
            item, fields = update.item, dict(update.fields)
            if "prompt" in fields:
                prompt_key = fields["prompt"]
                prompt = None
                if prompt_key is not None:
                    prompt = prompts.get(prompt_key)
                    if prompt is None:
                        category, word, text = prompt_key
                        prompt = Prompt.objects.create(
                            study=self.study, category=category, word=word, text=text
                        )
                        prompts[prompt_key] = prompt
                fields["prompt"] = prompt
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
        ItemChange.objects.bulk_create(audit_rows)

    def _write(
        self, items: dict[str, list[tuple[_RowPlan, _FileCheck]]], updates: list[_ItemUpdatePlan]
    ) -> None:
        """Store the files of the good rows, then write every new item and every update in one
        transaction. A dry run stops before anything is stored, counting what would be written.

        A file that cannot be stored (unreadable now, or changed since it was checked) refuses
        its row and its item, like any other bad row. Whatever happens — a refused item, a
        database error, Ctrl-C — the files this import stored that no Image row points to
        afterwards are removed again, so MEDIA_ROOT never keeps an orphan.
        """
        if self.dry_run:
            self.summary.accepted += sum(len(rows) for rows in items.values())
            self.summary.updated = [update.report for update in updates]
            return
        if not items and not updates:
            return
        rows = [(plan, check) for group in items.values() for plan, check in group]
        try:
            stored: list[ValidatedImage | str] = []
            if rows:
                with ThreadPoolExecutor(max_workers=IMPORT_WORKERS, thread_name_prefix="image-store") as pool:
                    stored = list(pool.map(self._store_file, *zip(*rows, strict=True)))
            names: dict[int, ValidatedImage] = {}
            failed: dict[str, str] = {}
            for (plan, _), result in zip(rows, stored, strict=True):
                if isinstance(result, ValidatedImage):
                    names[plan.number] = result
                else:
                    self.reject(plan.number, plan.path, result)
                    failed.setdefault(plan.item_key, f"row {plan.number}")
            for key, where in failed.items():
                refused = {r.row for r in self.summary.rejected}
                for plan, _ in items.pop(key):
                    if plan.number not in refused:
                        self.reject(
                            plan.number,
                            plan.path,
                            f"item {key} has a refused row ({where}): the item is not imported",
                        )
            if items or updates:
                try:
                    with transaction.atomic():
                        if items:
                            self._rows_write(items, names)
                        self._updates_write(updates)
                    self.summary.updated = [update.report for update in updates]
                except DatabaseError as exc:
                    # Every value was checked above; this is the safety net for what the checks
                    # did not foresee (or a concurrent writer): one clear message, nothing kept.
                    self.summary.accepted = 0
                    self.summary.updated = []
                    raise ImportRejected(
                        f"the database refused the import ({exc.__class__.__name__}: {exc}); "
                        "nothing was written"
                    ) from exc
        finally:
            self._orphans_remove()

    def _orphans_remove(self) -> None:
        """Remove the files this import wrote that no Image row points to (after a refused item
        or a failed transaction). If the database cannot even be asked, every new file goes:
        no row of this import was committed then."""
        if not self.new_files:
            return
        try:
            referenced = set(Image.objects.filter(file__in=self.new_files).values_list("file", flat=True))
        except DatabaseError:
            referenced = set()
        for name in set(self.new_files) - referenced:
            (Path(settings.MEDIA_ROOT) / name).unlink(missing_ok=True)

    def _store_file(self, plan: _RowPlan, check: _FileCheck) -> ValidatedImage | str:
        """Store a checked file (read again: the check kept no bytes); return what was stored,
        or the reason the row is refused. A file that changed since it was checked is refused,
        never stored unchecked. Runs in worker threads."""
        try:
            data = _read_limited(plan.file_path)
        except (DomainError, OSError) as exc:
            return _rows_reason(exc)
        if hashlib.sha256(data).hexdigest() != check.sha256:
            return "the file changed while it was being imported: import it again"
        validated = ValidatedImage(
            data=data, sha256=check.sha256, format=check.format, width=check.width, height=check.height
        )
        target = Path(settings.MEDIA_ROOT) / validated.storage_name
        if target.exists() and target.stat().st_size == len(data):
            return validated
        # Recorded before writing, so an interrupted write is cleaned up too.
        with self.new_files_lock:
            self.new_files.append(validated.storage_name)
        try:
            _file_write(validated)
        except OSError as exc:
            return f"cannot store the file in MEDIA_ROOT: {exc.strerror or exc}"
        return validated

    def _rows_write(
        self,
        items: dict[str, list[tuple[_RowPlan, _FileCheck]]],
        names: dict[int, ValidatedImage],
    ) -> None:
        prompts = {(p.category, p.word, p.text): p for p in Prompt.objects.filter(study=self.study)}
        shas = {validated.sha256 for validated in names.values()}
        images = {img.sha256: img for img in Image.objects.filter(sha256__in=shas)}
        new_images = {}
        for validated in names.values():
            if validated.sha256 not in images and validated.sha256 not in new_images:
                new_images[validated.sha256] = Image(
                    sha256=validated.sha256,
                    file=validated.storage_name,
                    width=validated.width,
                    height=validated.height,
                    format=validated.format,
                )
        # ignore_conflicts: another import may have stored the same bytes a moment ago.
        Image.objects.bulk_create(list(new_images.values()), ignore_conflicts=True)
        if new_images:
            images.update({img.sha256: img for img in Image.objects.filter(sha256__in=list(new_images))})
        existing_items = {
            item.key: item for item in Item.objects.filter(study=self.study, key__in=list(items))
        }
        new_items: list[Item] = []
        for key, rows in items.items():
            if key in existing_items:
                continue
            plans = [plan for plan, _ in rows]
            first = next((p for p in plans if p.role in (ImageRole.OUTPUT, ImageRole.IMAGE)), plans[0])
            prompt_key = next((p.prompt_key for p in plans if p.prompt_key), None)
            prompt = None
            if prompt_key is not None:
                prompt = prompts.get(prompt_key)
                if prompt is None:
                    category, word, text = prompt_key
                    prompt = Prompt.objects.create(study=self.study, category=category, word=word, text=text)
                    prompts[prompt_key] = prompt
            metadata: dict[str, str] = {}
            for p in plans:
                metadata.update(p.metadata)
            new_items.append(
                Item(
                    study=self.study,
                    key=key,
                    prompt=prompt,
                    t2i_model=next((p.t2i_model for p in plans if p.t2i_model), ""),
                    seed=next((p.seed for p in plans if p.seed is not None), None),
                    index=next((p.index for p in plans if p.index is not None), None),
                    params=first.params,
                    metadata=metadata,
                    # A row's own questions win; without them the protocol decides from the metadata.
                    question_keys=list(next((p.question_keys for p in plans if p.question_keys), ()))
                    or protocol_spec(self.study.protocol).item_question_keys(metadata),
                    queue=protocol_spec(self.study.protocol).queue_default,
                )
            )
        Item.objects.bulk_create(new_items)
        by_key = {
            item.key: item
            for item in Item.objects.filter(study=self.study, key__in=list(items)).only("id", "key")
        }
        links = [
            ItemImage(
                item=by_key[key],
                image=images[names[plan.number].sha256],
                role=plan.role,
                source_path=plan.path,
            )
            for key, rows in items.items()
            for plan, _ in rows
        ]
        ItemImage.objects.bulk_create(links)
        self.summary.accepted += len(links)


def images_import(
    *,
    study: Study,
    manifest_path: str | os.PathLike[str],
    root: str | os.PathLike[str],
    user: Any = None,
    progress: Callable[[ImportSummary, int], None] | None = None,
    dry_run: bool = False,
    source: str = "",
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
    """
    root_path = Path(root)
    if not root_path.is_dir():
        raise ImportRejected(f"import root {root} is not a folder")
    required = (
        PAIR_MANIFEST_REQUIRED_COLUMNS if study.protocol == "pair_change" else MANIFEST_REQUIRED_COLUMNS
    )
    rows = csv_rows_read(manifest_path, required=required)
    columns = list(dict.fromkeys(column for _, row in rows for column in row if column != "__error__"))
    summary = ImportSummary(dry_run=dry_run, reports=("updated",))
    _ManifestImport(
        study=study,
        root=root_path.resolve(),
        summary=summary,
        columns=columns,
        dry_run=dry_run,
        audit=_Audit(user=user, source=source or f"import of {Path(manifest_path).name}"),
    ).run(rows)
    summary.rejected.sort(key=lambda r: r.row)
    if progress:
        progress(summary, len(rows))
    return summary


def study_get_or_create(
    *, slug: str, name: str | None = None, protocol: str = "gender"
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
    """The existing study with this slug, for a command that fills it. Imports never create a
    study (a typo would silently start a new one): an unknown slug raises ``ImportRejected``
    listing the studies and naming ``create_study``."""
    return study_by_slug(
        slug,
        missing=lambda known: ImportRejected(
            f"no study with slug '{slug}' (existing studies: {known or 'none yet'}); imports never create a "
            f"study: create it first with `manage.py create_study {slug} --protocol …`"
        ),
    )


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
        return images_import(study=study, manifest_path=root / ZIP_MANIFEST_NAME, root=root, user=user)
