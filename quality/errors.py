"""Errors of quality control: the message is meant for the user who caused it."""

from __future__ import annotations

from studies.errors import DomainError


class QualityError(DomainError):
    """An exclusion or re-inclusion that cannot be done (already excluded, not excluded)."""
