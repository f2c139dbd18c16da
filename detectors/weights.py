"""Where a detector's weights come from: an environment variable, else a default, never the network."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from detectors.base import DetectorUnavailable

#: The paper's checkpoints (appendix A, section 5.1). Keys are weight keys, not detector keys:
#: clip, clip_prob, clip_uncertain and clip_enhance all read the ``clip`` weights.
DEFAULT_WEIGHTS: dict[str, str] = {
    "clip": "openai/clip-vit-large-patch14",
    "blip2": "Salesforce/blip2-opt-2.7b",
    # ultralytics downloads this by name when online; offline it has to be a local file.
    "yolo": "yolov8n.pt",
}

#: Files that mark a folder as holding a transformers / diffusers model.
TRANSFORMERS_CONFIGS: tuple[str, ...] = ("config.json",)

_FILE_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".onnx", ".yaml", ".yml", ".dat", ".ckpt")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def weights_env_var(key: str) -> str:
    """``clip`` → ``BIASLAB_CLIP_WEIGHTS``; any character that is not a letter or digit → ``_``."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_").upper()
    if not slug:
        raise ValueError(f"not a weights key: {key!r}")
    return f"BIASLAB_{slug}_WEIGHTS"


def resolve_weights(
    key: str,
    default: str | None = None,
    *,
    config_names: Sequence[str] = TRANSFORMERS_CONFIGS,
    override: str | None = None,
    what: str = "",
) -> str:
    """The weights to load for ``key``: ``configured_value(key, default, override=override)``."""
    var = weights_env_var(key)
    value = configured_value(key, default, override=override)
    if not value:
        raise DetectorUnavailable(
            f"No weights configured for {key!r} (there is no default): set {var} to "
            f"{what or 'a local folder or file'}."
        )
    path = Path(value).expanduser()
    if path.is_dir():
        return _checked_folder(path, var, config_names, what)
    if path.is_file():
        return str(path.resolve())
    if _looks_like_path(value):
        raise DetectorUnavailable(
            f"Weights {value!r} for {key!r} do not exist on this machine: set {var} to an "
            f"existing local folder or file{f' — {what}' if what else ''}."
        )
    return _checked_hub_id(value, var, config_names, what)


def configured_value(key: str, default: str | None = None, *, override: str | None = None) -> str:
    """The weights as configured, unchecked: ``override``, else ``BIASLAB_<KEY>_WEIGHTS``, else ``default``,
    else ``DEFAULT_WEIGHTS[key]``, else ``""`` (one order for loading and for version strings)."""
    return (
        str(override or "").strip()
        or os.environ.get(weights_env_var(key), "").strip()
        or (default or DEFAULT_WEIGHTS.get(key, ""))
    )


def _looks_like_path(value: str) -> bool:
    return (
        value.startswith(("/", ".", "~"))
        or value.lower().endswith(_FILE_SUFFIXES)
        or not _HUB_ID.match(value)
    )


def _checked_folder(path: Path, var: str, config_names: Sequence[str], what: str = "") -> str:
    if config_names and not any((path / name).is_file() for name in config_names):
        wanted = " or ".join(config_names)
        raise DetectorUnavailable(
            f"Folder {str(path)!r} holds no {wanted}, so it is not a saved model: set {var} to "
            f"{what or 'the folder that save_pretrained() wrote'}."
        )
    return str(path.resolve())


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time (tests move it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def _checked_hub_id(repo_id: str, var: str, config_names: Sequence[str], what: str = "") -> str:
    # try_to_load_from_cache only reads the cache folder: no HTTP, whatever HF_HUB_OFFLINE says.
    from huggingface_hub import try_to_load_from_cache

    cache = hub_cache_dir()
    for name in config_names or ("config.json",):
        found = try_to_load_from_cache(repo_id, name, cache_dir=str(cache))
        if isinstance(found, str) and Path(found).is_file():
            return repo_id
    raise DetectorUnavailable(
        f"Weights {repo_id!r} are not in the local Hugging Face cache ({cache}) and this machine "
        f"does not download them: set {var} to {what or 'a local folder holding the saved model'} "
        f"(e.g. one written by `huggingface-cli download {repo_id} --local-dir DIR` elsewhere)."
    )


def hub_load_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``from_pretrained`` so a resolved id never touches the network."""
    return {"local_files_only": True}


def check_tokenizer_covers(tokenizer: Any, texts: Iterable[str], *, var: str) -> None:
    """Raise DetectorUnavailable unless ``tokenizer`` spells every word of ``texts``."""
    unk = getattr(tokenizer, "unk_token_id", None)
    for text in texts:
        # Without special tokens: CLIP's unknown token *is* its end-of-text token.
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids or (unk is not None and unk in ids):
            raise DetectorUnavailable(
                f"The tokenizer loaded for {var} has {len(tokenizer)} tokens and cannot spell "
                f"{text!r}: the weights are incomplete or not the real ones. Set {var} to a "
                "local folder holding the full saved model."
            )


def weights_label(value: str) -> str:
    """How weights appear in a detector version: a hub id as written, a local path by its name."""
    value = value.strip()
    if not value:
        return "unconfigured"
    path = Path(value).expanduser()
    return path.name if path.exists() or _looks_like_path(value) else value


def configured_weights(key: str, default: str | None = None, *, override: str | None = None) -> str:
    """The weights for ``key`` as configured, for version strings: stable before and after load,
    and the same on every GPU host of a sharded run (see ``weights_label``)."""
    return weights_label(configured_value(key, default, override=override))
