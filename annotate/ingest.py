"""Bringing images into a study: validate the bytes, store them under their content hash, record them.

Two entry points write here:

- ``image_bytes_store`` stores one image given as bytes (used by ``generate_images`` and by the
  importer's slow path);
- ``images_import`` reads a manifest CSV and imports every row it can, in chunks of one
  transaction each, and returns an ``ImportSummary`` (accepted, duplicates, rejected with reasons).

Every image is opened with Pillow from the allow-list ``settings.BIASLAB_IMAGE_FORMATS``, its
pixel count is checked from the header before anything is decoded (decompression bombs), then
``verify()`` and a full decode catch corrupt and truncated files. Files are stored as
``MEDIA_ROOT/images/<sha[:2]>/<sha>.<ext>``; the same bytes are stored once per study.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from annotate.errors import AnnotateError, ImportRejected
from annotate.models import Image, Prompt, Study

# Storage extension per Pillow format name; a format missing here is stored under its lower name.
_EXTENSIONS = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tif"}

# Files bigger than this are refused before being read into memory (a PNG of the maximum pixel
# count is far smaller); overridable from settings for unusual studies.
DEFAULT_MAX_IMAGE_BYTES = 256 * 1024**2

MANIFEST_REQUIRED_COLUMNS = ("image", "t2i_model", "prompt", "category", "word")
MANIFEST_OPTIONAL_COLUMNS = ("seed", "index", "params")

# Rows imported per transaction: a crash loses at most the chunk being written, never one
# already reported as accepted.
IMPORT_CHUNK_SIZE = 500
# Threads reading, hashing and decoding files (all release the GIL); the database work stays
# on the calling thread.
IMPORT_WORKERS = min(8, os.cpu_count() or 1)


# --- Domain errors ------------------------------------------------------------------------------


class ImageRejected(AnnotateError):
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


class DuplicateImage(AnnotateError):
    """The same bytes are already in the study under another path."""


class ImagePathConflict(AnnotateError):
    """The path was already imported into the study with different bytes."""


class PathOutsideRoot(AnnotateError):
    """A manifest path escapes the import root (``../``, absolute path, symlink out)."""


class InvalidManifestRow(AnnotateError):
    """A manifest row has an empty required value, a bad seed/index or params that are not JSON."""


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


def _existing_check(*, study: Study, source_path: str, sha256: str) -> Image | None:
    """Return the image already stored for this path and hash, or raise if path/hash conflict."""
    same_path = Image.objects.filter(study=study, source_path=source_path).first()
    if same_path is not None:
        if same_path.sha256 == sha256:
            return same_path
        raise ImagePathConflict(
            f"{source_path} was already imported with different content (sha256 {same_path.sha256[:12]}…)"
        )
    same_hash = Image.objects.filter(study=study, sha256=sha256).only("source_path").first()
    if same_hash is not None:
        raise DuplicateImage(f"same image content as {same_hash.source_path}, already in the study")
    return None


def image_bytes_store(
    *,
    study: Study,
    prompt: Prompt,
    data: bytes,
    source_path: str,
    t2i_model: str,
    seed: int | None = None,
    index: int | None = None,
    params: dict[str, Any] | None = None,
) -> tuple[Image, bool]:
    """Validate and store one image of ``study``; return ``(image, created)``.

    The same path with the same bytes returns the existing image (``created`` False), so
    re-running a generation or an import changes nothing. Raises ``ImageRejected`` subclasses
    for unusable bytes, ``DuplicateImage`` when the bytes are already stored under another
    path, ``ImagePathConflict`` when the path holds other bytes.
    """
    validated = image_file_validate(data)
    existing = _existing_check(study=study, source_path=source_path, sha256=validated.sha256)
    if existing is not None:
        return existing, False
    name = _file_write(validated)
    try:
        with transaction.atomic():
            image = Image.objects.create(
                study=study,
                prompt=prompt,
                t2i_model=t2i_model,
                source_path=source_path,
                sha256=validated.sha256,
                file=name,
                width=validated.width,
                height=validated.height,
                format=validated.format,
                seed=seed,
                index=index,
                params=params or {},
            )
    except IntegrityError:
        # Another process stored the same path or bytes in the meantime: answer as it would.
        existing = _existing_check(study=study, source_path=source_path, sha256=validated.sha256)
        if existing is None:
            raise
        return existing, False
    return image, True


# --- Manifest import ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RejectedRow:
    """One row that was not imported: CSV row number (header = 1), the path given, and why."""

    row: int
    path: str
    reason: str

    def __str__(self) -> str:
        return f"row {self.row} ({self.path or 'no path'}): {self.reason}"


@dataclass
class ImportSummary:
    """What an import did: rows accepted (new), duplicates (already there), rejected rows."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[RejectedRow] = field(default_factory=list)
    skipped: int = 0

    @property
    def ok(self) -> bool:
        return not self.rejected

    def lines(self, noun: str = "images") -> list[str]:
        """Human-readable summary, one line each, rejected rows last."""
        out = [
            f"accepted: {self.accepted} {noun}",
            f"duplicates (already imported, unchanged): {self.duplicates}",
        ]
        if self.skipped:
            out.append(f"skipped (nothing to import): {self.skipped}")
        out.append(f"rejected: {len(self.rejected)}")
        out.extend(f"  {item}" for item in self.rejected)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "skipped": self.skipped,
            "rejected": [{"row": r.row, "path": r.path, "reason": r.reason} for r in self.rejected],
        }


def csv_rows_read(
    csv_path: str | os.PathLike[str], *, required: Iterable[str]
) -> list[tuple[int, dict[str, str]]]:
    """Read a UTF-8 CSV (BOM tolerated) into ``(row_number, row)`` pairs; the header is row 1.

    Raises ``ImportRejected`` naming every missing required column, or when the file is not
    readable CSV; the whole file is refused in both cases.
    """
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [name.strip() for name in (reader.fieldnames or [])]
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
                rows.append((number, {k: (v or "").strip() for k, v in raw.items() if k is not None}))
            return rows
    except UnicodeDecodeError as exc:
        raise ImportRejected(f"{Path(csv_path).name}: not UTF-8 text ({exc.reason})") from exc
    except csv.Error as exc:
        raise ImportRejected(f"{Path(csv_path).name}: not a readable CSV file ({exc})") from exc
    except FileNotFoundError as exc:
        raise ImportRejected(f"{csv_path}: file not found") from exc
    except OSError as exc:
        # A folder, an unreadable file: name it instead of a traceback.
        raise ImportRejected(f"{csv_path}: cannot read the CSV file ({exc.strerror or exc})") from exc


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
    resolved = (root / given).resolve()
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
    if column == "seed" and not -(2**63) <= number < 2**63:
        raise InvalidManifestRow(f"seed {number} does not fit in 64 bits")
    return number


def _params(row: dict[str, str]) -> dict[str, Any]:
    value = row.get("params", "")
    if value == "":
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidManifestRow(f"params is not valid JSON ({exc.msg})") from exc
    if not isinstance(parsed, dict):
        raise InvalidManifestRow('params must be a JSON object, e.g. {"steps": 30}')
    return parsed


@dataclass(frozen=True)
class _RowPlan:
    """A manifest row whose values are sound, before its file is looked at."""

    number: int
    path: str
    file_path: Path
    t2i_model: str
    prompt_key: tuple[str, str, str]
    seed: int | None
    index: int | None
    params: dict[str, Any]


@dataclass(frozen=True)
class _FileCheck:
    """What reading a row's file found: its hash, the validated image, or the error."""

    sha256: str = ""
    validated: ValidatedImage | None = None
    storage_name: str = ""
    error: Exception | None = None


@dataclass(frozen=True)
class _PendingRow:
    plan: _RowPlan
    validated: ValidatedImage
    storage_name: str

    @property
    def number(self) -> int:
        return self.plan.number

    @property
    def path(self) -> str:
        return self.plan.path


class _ManifestImport:
    """State of one manifest import: what the study holds, what the file already claimed.

    Each chunk goes through three steps: row values are checked in order (cheap); files are
    read, hashed, decoded and stored by a thread pool (Pillow, hashlib and file I/O release the
    GIL, so this is what scales with cores); then the rows are settled in order, so messages
    such as "same content as row 3" never depend on thread timing.
    """

    def __init__(self, *, study: Study, root: Path, summary: ImportSummary) -> None:
        self.study = study
        self.root = root
        self.summary = summary
        # Loaded once, so per-row checks never touch the database (6,000 rows < 1 minute).
        self.by_path: dict[str, str] = dict(
            Image.objects.filter(study=study).values_list("source_path", "sha256")
        )
        self.by_hash: dict[str, str] = {sha: path for path, sha in self.by_path.items()}
        self.file_paths: dict[str, int] = {}
        self.file_hashes: dict[str, tuple[int, str]] = {}
        self.prompts: dict[tuple[str, str, str], Prompt] = {
            (p.category, p.word, p.text): p for p in Prompt.objects.filter(study=study)
        }

    def reject(self, number: int, path: str, reason: str) -> None:
        self.summary.rejected.append(RejectedRow(number, path, reason))

    def row_plan(self, number: int, row: dict[str, str]) -> _RowPlan:
        """Check a row's values and path (in file order); raises the row's rejection."""
        path = row.get("image", "")
        if "__error__" in row:
            raise InvalidManifestRow(row["__error__"])
        if path in self.file_paths:
            raise InvalidManifestRow(f"duplicate row: same image path as row {self.file_paths[path]}")
        self.file_paths[path] = number
        for column in ("t2i_model", "prompt", "category", "word"):
            if not row.get(column):
                raise InvalidManifestRow(f"empty required value in column '{column}'")
        seed, index, params = _optional_int(row, "seed"), _optional_int(row, "index"), _params(row)
        return _RowPlan(
            number=number,
            path=path,
            file_path=manifest_path_resolve(self.root, path),
            t2i_model=row["t2i_model"],
            prompt_key=(row["category"], row["word"], row["prompt"]),
            seed=seed,
            index=index,
            params=params,
        )

    def file_check(self, plan: _RowPlan) -> _FileCheck:
        """Read, hash, validate and store one file. Runs in worker threads: reads shared state
        only, and writes only content-addressed files."""
        try:
            data = _read_limited(plan.file_path)
            sha = hashlib.sha256(data).hexdigest()
            if plan.path in self.by_path:
                # Already imported (same bytes: validated then) or a conflict: no decoding.
                return _FileCheck(sha256=sha)
            validated = image_file_validate(data)
            return _FileCheck(sha256=sha, validated=validated, storage_name=_file_write(validated))
        except (AnnotateError, OSError) as exc:
            return _FileCheck(error=exc)

    def row_settle(self, plan: _RowPlan, check: _FileCheck) -> _PendingRow | None:
        """Decide a row in file order; returns the row to write, or None (already imported)."""
        if check.error is not None:
            raise check.error
        sha = check.sha256
        if sha in self.file_hashes:
            other_row, other_path = self.file_hashes[sha]
            raise DuplicateImage(f"duplicate row: same image content as row {other_row} ({other_path})")
        self.file_hashes[sha] = (plan.number, plan.path)
        known = self.by_path.get(plan.path)
        if known == sha:
            self.summary.duplicates += 1
            return None
        if known is not None:
            raise ImagePathConflict(
                f"{plan.path} was already imported with different content (sha256 {known[:12]}…)"
            )
        if sha in self.by_hash:
            raise DuplicateImage(f"same image content as {self.by_hash[sha]}, already in the study")
        assert check.validated is not None  # file_check validates every path not yet imported
        return _PendingRow(plan=plan, validated=check.validated, storage_name=check.storage_name)

    def chunk_import(self, rows: list[tuple[int, dict[str, str]]], pool: ThreadPoolExecutor) -> None:
        """Check, store and write one chunk of manifest rows."""
        plans: list[_RowPlan] = []
        for number, row in rows:
            try:
                plans.append(self.row_plan(number, row))
            except (AnnotateError, OSError) as exc:
                self.reject(number, row.get("image", ""), _reason(exc))
        pending: list[_PendingRow] = []
        for plan, check in zip(plans, pool.map(self.file_check, plans), strict=True):
            try:
                item = self.row_settle(plan, check)
            except (AnnotateError, OSError) as exc:
                self.reject(plan.number, plan.path, _reason(exc))
                continue
            if item is not None:
                pending.append(item)
        self.chunk_write(pending)

    def _prompt(self, key: tuple[str, str, str]) -> Prompt:
        prompt = self.prompts.get(key)
        if prompt is None:
            category, word, text = key
            prompt = prompt_get_or_create(study=self.study, category=category, word=word, text=text)
            self.prompts[key] = prompt
        return prompt

    def chunk_write(self, pending: list[_PendingRow]) -> None:
        """Write one chunk's rows in one transaction with a single bulk insert (the files are
        already stored: content-addressed, so an orphan after a crash is harmless)."""
        if not pending:
            return
        try:
            with transaction.atomic():
                Image.objects.bulk_create([self._image(p) for p in pending])
        except IntegrityError:
            # A concurrent import took some of these paths or hashes: retry row by row so
            # every row gets its own answer.
            self.prompts.clear()
            for p in pending:
                self._row_write_alone(p)
            return
        for p in pending:
            self._remember(p)
            self.summary.accepted += 1

    def _image(self, p: _PendingRow) -> Image:
        v, plan = p.validated, p.plan
        return Image(
            study=self.study,
            prompt=self._prompt(plan.prompt_key),
            t2i_model=plan.t2i_model,
            source_path=plan.path,
            sha256=v.sha256,
            file=p.storage_name,
            width=v.width,
            height=v.height,
            format=v.format,
            seed=plan.seed,
            index=plan.index,
            params=plan.params,
        )

    def _row_write_alone(self, p: _PendingRow) -> None:
        plan = p.plan
        category, word, text = plan.prompt_key
        try:
            _, created = image_bytes_store(
                study=self.study,
                prompt=prompt_get_or_create(study=self.study, category=category, word=word, text=text),
                data=p.validated.data,
                source_path=plan.path,
                t2i_model=plan.t2i_model,
                seed=plan.seed,
                index=plan.index,
                params=plan.params,
            )
        except AnnotateError as exc:
            self.reject(p.number, p.path, str(exc))
            return
        self._remember(p)
        if created:
            self.summary.accepted += 1
        else:
            self.summary.duplicates += 1

    def _remember(self, p: _PendingRow) -> None:
        self.by_path[p.path] = p.validated.sha256
        self.by_hash[p.validated.sha256] = p.path


def images_import(
    *,
    study: Study,
    manifest_path: str | os.PathLike[str],
    root: str | os.PathLike[str],
    user: Any = None,
    chunk_size: int = IMPORT_CHUNK_SIZE,
    progress: Callable[[ImportSummary, int], None] | None = None,
) -> ImportSummary:
    """Import every usable row of a manifest CSV into ``study``; see the module docstring.

    Raises ``ImportRejected`` (nothing written) when the file lacks a required column or is not
    readable CSV, or when ``root`` is not a folder. Row problems never stop the import: each
    rejected row is listed with its reason. Each chunk of ``chunk_size`` rows is written in one
    transaction, after which ``progress(summary, rows_done)`` is called. Re-running the same
    import changes nothing (every row counts as a duplicate). ``user`` is accepted for audit
    by callers (admin upload); images record no importer.
    """
    root_path = Path(root)
    if not root_path.is_dir():
        raise ImportRejected(f"import root {root} is not a folder")
    rows = csv_rows_read(manifest_path, required=MANIFEST_REQUIRED_COLUMNS)
    summary = ImportSummary()
    state = _ManifestImport(study=study, root=root_path.resolve(), summary=summary)
    with ThreadPoolExecutor(max_workers=IMPORT_WORKERS, thread_name_prefix="image-import") as pool:
        for start in range(0, len(rows), chunk_size):
            chunk = rows[start : start + chunk_size]
            state.chunk_import(chunk, pool)
            if progress:
                progress(summary, start + len(chunk))
    summary.rejected.sort(key=lambda r: r.row)
    return summary


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, AnnotateError):
        return f"cannot read file: {exc.strerror or exc}"
    return str(exc)


def study_get_or_create(*, slug: str, name: str | None = None) -> tuple[Study, bool]:
    """The study with this slug, created with the default label set when missing.

    Raises ``ImportRejected`` for a slug that is not letters, digits, '-' or '_'."""
    try:
        validate_slug(slug)
    except ValidationError as exc:
        raise ImportRejected(f"study slug {slug!r} must contain only letters, digits, '-' and '_'") from exc
    existing = Study.objects.filter(slug=slug).first()
    if existing is not None:
        return existing, False
    base = name or slug.replace("-", " ").replace("_", " ").capitalize()
    title, n = base, 2
    while Study.objects.filter(name=title).exists():
        title, n = f"{base} ({n})", n + 1
    study = Study.objects.create(slug=slug, name=title)
    return study, True


# --- Zip upload (admin) -------------------------------------------------------------------------

ZIP_MANIFEST_NAME = "manifest.csv"
ZIP_MAX_MEMBERS = 100_000


class ZipRejected(ImportRejected):
    """An uploaded zip is refused whole: not a zip, too large, unsafe member, no manifest."""


def _zip_member_check(info: zipfile.ZipInfo) -> None:
    name = info.filename
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise ZipRejected(f"zip member {name!r} has an absolute path: the zip is refused")
    if ".." in name.replace("\\", "/").split("/"):
        raise ZipRejected(f"zip member {name!r} points outside the archive ('..'): the zip is refused")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise ZipRejected(f"zip member {name!r} is a symbolic link: the zip is refused")
    if info.flag_bits & 0x1:
        raise ZipRejected(f"zip member {name!r} is encrypted: the zip is refused")


def _zip_extract(archive: zipfile.ZipFile, target: Path, max_bytes: int) -> None:
    """Extract after checking every member; sizes are counted while writing, since a zip's
    declared sizes may lie."""
    members = archive.infolist()
    if len(members) > ZIP_MAX_MEMBERS:
        raise ZipRejected(f"the zip holds {len(members)} entries, more than {ZIP_MAX_MEMBERS}")
    for info in members:
        _zip_member_check(info)
    if sum(info.file_size for info in members) > max_bytes:
        raise ZipRejected(f"the zip expands to more than {max_bytes} bytes")
    root = target.resolve()
    written = 0
    for info in members:
        destination = (root / info.filename).resolve()
        if not destination.is_relative_to(root):
            raise ZipRejected(f"zip member {info.filename!r} points outside the archive: the zip is refused")
        if info.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(info) as source, open(destination, "wb") as sink:
            while chunk := source.read(1024 * 1024):
                written += len(chunk)
                if written > max_bytes:
                    raise ZipRejected(f"the zip expands to more than {max_bytes} bytes")
                sink.write(chunk)


def images_import_zip(*, study: Study, zip_file: IO[bytes], user: Any = None) -> ImportSummary:
    """Import a zip holding ``manifest.csv`` at its root and the images it lists.

    The whole zip is refused (``ZipRejected``, nothing written) when it is not a zip, is larger
    than ``settings.BIASLAB_MAX_UPLOAD_BYTES`` packed or unpacked, has a member with an absolute
    path, ``..``, a symlink or encryption, or lacks the manifest. Otherwise it behaves exactly
    like ``images_import`` with the extracted folder as root.
    """
    max_bytes = int(settings.BIASLAB_MAX_UPLOAD_BYTES)
    size = getattr(zip_file, "size", None)
    if size is not None and size > max_bytes:
        raise ZipRejected(f"the upload is {size} bytes, above the limit of {max_bytes}")
    try:
        archive = zipfile.ZipFile(zip_file)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ZipRejected(f"not a zip file ({exc})") from exc
    with archive, tempfile.TemporaryDirectory(prefix="biaslab-zip-") as folder:
        names = {info.filename for info in archive.infolist()}
        if ZIP_MANIFEST_NAME not in names:
            raise ZipRejected(f"the zip has no {ZIP_MANIFEST_NAME} at its root")
        try:
            _zip_extract(archive, Path(folder), max_bytes)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ZipRejected(f"the zip is damaged ({exc})") from exc
        root = Path(folder)
        return images_import(study=study, manifest_path=root / ZIP_MANIFEST_NAME, root=root, user=user)
