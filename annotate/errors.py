"""Domain errors of the human side. Views and commands turn them into clear messages."""

from __future__ import annotations


class AnnotateError(Exception):
    """Base class: the message is meant for the user who caused it."""


class ImportRejected(AnnotateError):
    """A whole import file is unusable (missing column, unreadable CSV)."""


class InvalidLabel(AnnotateError):
    """The label is not in the study's label set, or needs a reason it was not given."""


class NotAssigned(AnnotateError):
    """The user is not an annotator of this study or does not hold a seat on this image."""


class ImageFull(AnnotateError):
    """The image already has its N labels."""


class AlreadyResolved(AnnotateError):
    """A researcher (or an import) already set this image's final label; labels are frozen."""


class NothingToUndo(AnnotateError):
    """The annotator has no earlier label to go back to."""


class NotDisputed(AnnotateError):
    """The image is not in the dispute queue (labels missing or in agreement)."""
