"""Unpacking an uploaded zip that holds a manifest and the images it lists, whatever made the
zip (layouts and refusals: docs/explanation/images.md)."""

from __future__ import annotations

import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from studies.errors import ImportRejected

#: Folders and files that zip tools add and that are never part of an import.
IGNORED_FOLDERS = frozenset({"__MACOSX"})
IGNORED_FILES = frozenset({".DS_Store", "Thumbs.db"})
APPLEDOUBLE_PREFIX = "._"
MANIFEST_NAME = "manifest.csv"
MAX_MEMBERS = 100_000

_CHUNK = 1024 * 1024


class ZipRejected(ImportRejected):
    """An uploaded zip is refused whole (not a zip, too large, unsafe member, no manifest); the
    message says why, in words for the person who uploaded it."""


@dataclass(frozen=True)
class _Member:
    info: zipfile.ZipInfo
    name: str  # normalised: "/" separators, no empty or "." parts
    is_dir: bool


def _member_check(info: zipfile.ZipInfo) -> None:
    """Refuse the zip for a member that is unsafe to unpack, whatever its layout."""
    raw = info.filename
    slashed = raw.replace("\\", "/")
    if slashed.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise ZipRejected(f"zip member {raw!r} has an absolute path: the zip is refused")
    if ".." in slashed.split("/"):
        raise ZipRejected(f"zip member {raw!r} points outside the archive ('..'): the zip is refused")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise ZipRejected(f"zip member {raw!r} is a symbolic link: the zip is refused")
    if info.flag_bits & 0x1:
        raise ZipRejected(f"zip member {raw!r} is encrypted: the zip is refused")


def zip_members(archive: zipfile.ZipFile, *, max_bytes: int) -> list[_Member]:
    """Every member checked (see the module docstring); the ones to consider, names normalised."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ZipRejected(f"the zip holds {len(infos)} entries, more than {MAX_MEMBERS}")
    members: list[_Member] = []
    for info in infos:
        _member_check(info)
        slashed = info.filename.replace("\\", "/")
        parts = [part for part in slashed.split("/") if part not in ("", ".")]
        if (
            not parts
            or not IGNORED_FOLDERS.isdisjoint(parts)
            or parts[-1] in IGNORED_FILES
            or parts[-1].startswith(APPLEDOUBLE_PREFIX)
        ):
            continue
        is_dir = slashed.endswith("/")
        members.append(_Member(info=info, name="/".join(parts), is_dir=is_dir))
    if sum(info.file_size for info in infos) > max_bytes:
        raise ZipRejected(f"the zip expands to more than {max_bytes} bytes")
    return members


def manifest_folder(members: list[_Member]) -> str:
    """The folder (``""`` for the root, else ending in ``/``) of the one manifest among ``members``."""
    found = sorted(m.name for m in members if not m.is_dir and m.name.split("/")[-1] == MANIFEST_NAME)
    if not found:
        raise ZipRejected(
            f"the zip has no {MANIFEST_NAME} at its root or in any of its folders "
            "(__MACOSX/ and .DS_Store files are ignored)"
        )
    if len(found) > 1:
        raise ZipRejected(
            f"the zip holds several {MANIFEST_NAME} files ({', '.join(found)}): keep exactly one"
        )
    return found[0][: -len(MANIFEST_NAME)]


def _write(archive: zipfile.ZipFile, member: _Member, destination: Path, written: int, max_bytes: int) -> int:
    """Unpack one file; return the bytes written so far, ``written`` included."""
    with archive.open(member.info) as source, open(destination, "xb") as sink:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            if written > max_bytes:
                raise ZipRejected(f"the zip expands to more than {max_bytes} bytes")
            sink.write(chunk)
    return written


def zip_extract(archive: zipfile.ZipFile, target: Path, *, max_bytes: int) -> Path:
    """Unpack the manifest's folder of ``archive`` into the empty folder ``target`` and return it;
    ``ZipRejected`` for an unsafe or unusable zip."""
    members = zip_members(archive, max_bytes=max_bytes)
    prefix = manifest_folder(members)
    root = target.resolve()
    seen: set[str] = set()
    written = 0
    for member in members:
        if not member.name.startswith(prefix) or member.name == prefix.rstrip("/"):
            continue
        relative = member.name[len(prefix) :]
        destination = (root / relative).resolve()
        if not destination.is_relative_to(root):
            raise ZipRejected(f"zip member {member.info.filename!r} points outside the archive")
        try:
            if member.is_dir:
                destination.mkdir(parents=True, exist_ok=True)
                continue
            if relative in seen:
                raise ZipRejected(f"the zip holds {member.name} twice: the zip is refused")
            seen.add(relative)
            destination.parent.mkdir(parents=True, exist_ok=True)
            written = _write(archive, member, destination, written, max_bytes)
        except NotImplementedError as exc:  # zipfile: "That compression method is not supported"
            raise ZipRejected(
                f"zip member {member.info.filename!r} uses a compression method that cannot be read "
                f"({exc}); zip it again with the standard method (deflate)"
            ) from exc
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ZipRejected(f"the zip is damaged ({exc})") from exc
        except OSError as exc:  # a file where a folder must go, a name the file system refuses
            raise ZipRejected(
                f"zip member {member.info.filename!r} cannot be unpacked ({exc.strerror or exc}): "
                "the zip is refused"
            ) from exc
    return root
