"""Image files: the checks every image passes before it is stored, the content-addressed file
store (``MEDIA_ROOT/images/<sha[:2]>/<sha>.<ext>``), and one image stored as an item
(``item_image_store``). See docs/explanation/images.md."""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from studies.errors import DomainError
from studies.imports.manifest_rows import DuplicateImage, ImagePathConflict, changed_file_message
from studies.models import Image, ImageRole, Item, ItemImage, Prompt, Study
from studies.protocols import protocol_spec

# Storage extension per Pillow format name; a format missing here is stored under its lower name.
_EXTENSIONS = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tif"}

# Files bigger than this are refused before being read into memory.
DEFAULT_MAX_IMAGE_BYTES = 256 * 1024**2


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


@dataclass(frozen=True)
class ValidatedImage:
    """An image file that passed every check, with what is needed to store it."""

    data: bytes
    sha256: str
    format: str
    width: int
    height: int

    @property
    def storage_name(self) -> str:
        return storage_name(self.sha256, self.format)


def read_limited(path_or_file: str | os.PathLike[str] | bytes) -> bytes:
    limit = int(getattr(settings, "BIASLAB_MAX_IMAGE_BYTES", DEFAULT_MAX_IMAGE_BYTES))
    if isinstance(path_or_file, bytes):
        data = path_or_file
    else:
        # Plain descriptor calls, not ``open()``: a third fewer system calls at a million small files.
        fd = os.open(path_or_file, os.O_RDONLY)  # not inherited by child processes (PEP 446)
        try:
            # Read what the file holds, not ``limit + 1``: a huge read leaves a memory mapping per file.
            size = os.fstat(fd).st_size
            if size > limit:
                raise ImageTooLarge(f"file is larger than {limit} bytes")
            data = os.read(fd, size + 1)
            # A short read or a file that changed size: read on to the end, still bounded.
            if len(data) != size:
                parts = [data]
                total = len(data)
                while total <= limit and (part := os.read(fd, limit + 1 - total)):
                    parts.append(part)
                    total += len(part)
                data = b"".join(parts)
        finally:
            os.close(fd)
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
    """Pillow format ids from ``settings.BIASLAB_IMAGE_FORMATS`` ("JPG" read as "JPEG")."""
    PILImage.init()
    names = [name.strip().upper() for name in settings.BIASLAB_IMAGE_FORMATS]
    names = ["JPEG" if name == "JPG" else name for name in names]
    return [name for name in dict.fromkeys(names) if name in PILImage.OPEN]


def image_file_validate(path_or_file: str | os.PathLike[str] | bytes) -> ValidatedImage:
    """Check that a file (path or bytes) is a sound image we may store; raises an
    ``ImageRejected`` subclass."""
    data = read_limited(path_or_file)
    fmt, width, height = image_facts(data)
    return ValidatedImage(
        data=data, sha256=hashlib.sha256(data).hexdigest(), format=fmt, width=width, height=height
    )


def image_facts(data: bytes) -> tuple[str, int, int]:
    """``(format, width, height)`` of bytes passing every check of ``image_file_validate``."""
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
    return fmt, width, height


_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"
# This process's id, kept (a system call per file otherwise) and renewed in a forked child.
_PID = os.getpid()


def _pid_renew() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_pid_renew)


def file_write(validated: ValidatedImage, *, before_write: Callable[[str, str], None] | None = None) -> str:
    """Write the bytes under their content-hash name unless already there (temporary name, then
    rename); return the name. ``before_write(name, temporary)`` is told first."""
    name = validated.storage_name
    target = os.path.join(settings.MEDIA_ROOT, name)
    try:
        if os.stat(target).st_size == len(validated.data):
            return name
    except FileNotFoundError:
        pass
    folder = os.path.dirname(target)
    tmp = os.path.join(folder, f".incoming-{_HOST}-{_PID}-{threading.get_ident()}-{validated.sha256[:16]}")
    if before_write is not None:
        before_write(name, tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(tmp, flags, 0o666)
    except FileNotFoundError:  # the folder's first file
        os.makedirs(folder, exist_ok=True)
        fd = os.open(tmp, flags, 0o666)
    try:
        try:
            # ``os.write``, not ``os.fdopen``: its buffered file costs three system calls more.
            view = memoryview(validated.data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return name


def image_file_get_or_create(validated: ValidatedImage) -> Image:
    """The Image row of these bytes, storing the file and creating the row when new."""
    existing = Image.objects.filter(sha256=validated.sha256).first()
    if existing is not None:
        return existing
    name = file_write(validated)
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


def storage_name(sha256: str, fmt: str) -> str:
    """Where a file of this hash and Pillow format is stored under MEDIA_ROOT."""
    return f"images/{sha256[:2]}/{sha256}.{_EXTENSIONS.get(fmt, fmt.lower())}"


def prompt_get_or_create(*, study: Study, category: str, word: str, text: str) -> Prompt:
    """The study's prompt with this category, word and text, created if missing."""
    prompt, _ = Prompt.objects.get_or_create(study=study, category=category, word=word, text=text)
    return prompt


def _existing_item(*, study: Study, key: str, role: str, sha256: str) -> Item | None:
    """The item stored under this key with these bytes in this role, or None; raises when the key
    holds other bytes or the bytes are another item's."""
    link = (
        ItemImage.objects.filter(item__study=study, item__key=key, role=role)
        .select_related("item", "image")
        .first()
    )
    if link is not None:
        if link.image.sha256 == sha256:
            return link.item
        raise ImagePathConflict(changed_file_message(study, key, link.image.sha256))
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
    (created when new); return ``(item, created)``."""
    validated = image_file_validate(data)
    existing = _existing_item(study=study, key=key, role=role, sha256=validated.sha256)
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
        question_keys=protocol_spec(study.protocol).item_question_keys(metadata or {}),
        queue=protocol_spec(study.protocol).queue_default,
    )
    ItemImage.objects.create(item=item, image=image, role=role, source_path=source_path or key)
    for other_role, other in (extra_images or {}).items():
        ItemImage.objects.create(item=item, image=other, role=other_role, source_path=other.file)
    return item, True
