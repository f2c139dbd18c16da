"""Domain errors of join links; views and commands show their message as it is."""

from __future__ import annotations

from studies.errors import DomainError


class CrowdError(DomainError):
    """A join link cannot be made or used that way (bad quota, URL, parameter name, example)."""


class LinkRefused(CrowdError):
    """The link takes no one (more): closed, expired, full, or no participant id given."""
