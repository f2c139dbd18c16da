"""YOLO checkpoints loaded without running code from them, unless a file is trusted by digest."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from detectors.base import DetectorUnavailable

TRUST_VAR = "BIASLAB_TRUSTED_WEIGHTS_SHA256"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# ultralytics reads its safe-load switch as a module global on every load; one load at a time
# may flip it, so a trusted load in one thread never makes another thread's load unsafe.
_SWITCH = threading.Lock()


def trusted_digests() -> frozenset[str]:
    """The SHA-256 digests in ``BIASLAB_TRUSTED_WEIGHTS_SHA256`` (read at call time)."""
    entries = [e.strip().lower() for e in os.environ.get(TRUST_VAR, "").split(",") if e.strip()]
    bad = [e for e in entries if not _SHA256.match(e)]
    if bad:
        raise DetectorUnavailable(f"{TRUST_VAR} must list SHA-256 digests (64 hex digits), got {bad[0]!r}.")
    return frozenset(entries)


def _private_copy(source: Path, folder: Path) -> tuple[Path, str]:
    """Copy ``source`` into ``folder`` (same name: ultralytics wants the ``.pt`` suffix) and
    return the copy with the SHA-256 of exactly the bytes written."""
    target = folder / source.name
    digest = hashlib.sha256()
    with source.open("rb") as read, target.open("wb") as write:
        for chunk in iter(lambda: read.read(1 << 20), b""):
            digest.update(chunk)
            write.write(chunk)
    return target, digest.hexdigest()


def pillow_open_restore() -> None:
    """Give ``PIL.Image.open`` back to Pillow after ultralytics replaced it (it does so when it is first
    imported). No-op when ultralytics was never imported."""
    from PIL import Image as PILImage

    patches = sys.modules.get("ultralytics.utils.patches")
    original = getattr(patches, "_image_open", None)
    if original is not None and PILImage.open is not original:
        PILImage.open = original


def _safe_load_supported() -> bool:
    import torch
    from ultralytics.nn import tasks

    pillow_open_restore()
    return hasattr(torch.serialization, "get_unsafe_globals_in_checkpoint") and hasattr(tasks, "SAFE_LOAD")


def _refused_by_unpickler(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the restricted unpickler refusing a global."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, pickle.UnpicklingError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _yolo(path: Path, *, safe: bool) -> Any:
    from ultralytics import YOLO
    from ultralytics.nn import tasks

    pillow_open_restore()
    with _SWITCH:
        before = tasks.SAFE_LOAD
        tasks.SAFE_LOAD = safe
        try:
            return YOLO(str(path))
        finally:
            tasks.SAFE_LOAD = before


def load_yolo(path: str | Path, *, var: str) -> Any:
    """``ultralytics.YOLO`` for the checkpoint at ``path``: restricted unpickling, or full unpickling when the
    file's SHA-256 is in ``BIASLAB_TRUSTED_WEIGHTS_SHA256``."""
    source = Path(path)
    trusted = trusted_digests()
    with tempfile.TemporaryDirectory(prefix="biaslab-weights-") as folder:
        copy, digest = _private_copy(source, Path(folder))
        if digest in trusted:
            try:
                return _yolo(copy, safe=False)
            except Exception as error:
                raise DetectorUnavailable(
                    f"Could not load the trusted YOLO weights {str(source)!r} ({error}); set {var} to a "
                    "YOLOv8 .pt checkpoint."
                ) from error
        how_to_trust = (
            f"If you trust this file, add its SHA-256 {digest} to {TRUST_VAR} (comma-separated) "
            "to load it with full unpickling."
        )
        if not _safe_load_supported():
            raise DetectorUnavailable(
                f"This torch / ultralytics cannot load {str(source)!r} without running code from it "
                f"(weights_only loading needs torch >= 2.6 and ultralytics >= 8.4). {how_to_trust}"
            )
        try:
            return _yolo(copy, safe=True)
        except Exception as error:
            if _refused_by_unpickler(error):
                raise DetectorUnavailable(
                    f"Refused to load {str(source)!r}: it holds objects outside the safe YOLO checkpoint "
                    f"format, and unpickling them could run code. Nothing from it was run. {how_to_trust}"
                ) from error
            raise DetectorUnavailable(
                f"Could not load YOLO weights {str(source)!r} ({error}); set {var} to a YOLOv8 .pt checkpoint."
            ) from error
