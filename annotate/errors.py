"""Domain errors of the human side. Views and commands turn them into clear messages."""

from __future__ import annotations

from studies.errors import DomainError, ImportRejected

__all__ = ["AnnotateError", "ImportRejected"]


class AnnotateError(DomainError):
    """Base class of the human side's errors: the message is meant for the user who caused it."""


class InvalidLabel(AnnotateError):
    """An answer the question does not take, a question not asked, or a missing reason."""


class UnknownQuestion(InvalidLabel):
    """An answer or reason names a question the item does not ask (``key``, in ``where``)."""

    def __init__(self, message: str, *, key: str, where: str = "answers") -> None:
        super().__init__(message)
        self.key = key
        self.where = where


class NotAssigned(AnnotateError):
    """The user is not an annotator of this study or does not hold a seat on this item."""


class ItemFull(AnnotateError):
    """The item already has its N annotators."""


class StaleSubmit(AnnotateError):
    """The form was drawn for a state that has changed since: nothing was stored."""


class AlreadyResolved(AnnotateError):
    """A researcher (or an import) already set this answer's final label; labels are frozen."""


class NothingToUndo(AnnotateError):
    """The annotator has no earlier label to go back to."""


class NotDisputed(AnnotateError):
    """The (item, question) is not in the dispute queue (labels missing or in agreement)."""
