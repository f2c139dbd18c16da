"""System check (``manage.py check``) of the detector registry: every entry names a class that
exists, found without importing the plugin (so torch and its kin stay unloaded)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from detectors.registry import DETECTORS
from studies.checks import dotted_path_problem


@register("detectors")
def check_detectors(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every ``detectors.registry.DETECTORS`` entry: its dotted path names a defined class."""
    return [
        Error(f"Detector {key!r}: {path!r}: {problem}.", id="detectors.E001")
        for key, path in DETECTORS.items()
        if (problem := dotted_path_problem(path))
    ]
