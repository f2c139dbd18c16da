"""Fixtures for the generation tests: the detectors' offline environment (no network, an empty
Hugging Face cache, no weights variables from the caller's shell) applies here too."""

from __future__ import annotations

from tests.detectors.conftest import offline_ml_env

__all__ = ["offline_ml_env"]
