"""Domain errors of the core; every app's errors derive from ``DomainError``."""

from __future__ import annotations


class DomainError(Exception):
    """Base class of every BiasLab domain error."""


class ImportRejected(DomainError):
    """A whole import file is unusable (missing column, unreadable CSV, not UTF-8)."""


class StudyConflict(DomainError):
    """A study cannot be (re)defined that way, e.g. new questions on a study that has labels."""


class StudyNotChosen(DomainError):
    """A command's ``--study`` names no study, or was left out while several studies exist."""


class AnnotatorsRefused(DomainError):
    """``annotators_add`` refuses the whole list (bad username, inactive account, staff)."""


class StaffRefused(AnnotatorsRefused):
    """Researchers and admins named as annotators without ``allow_staff``; ``usernames`` are they."""

    def __init__(self, message: str, usernames: list[str]) -> None:
        super().__init__(message)
        self.usernames = usernames
