"""Writes of the human side, one transaction per function; import the public names from here."""

from __future__ import annotations

from annotate.services.answers import REASON_MAX_CHARS, answer_validate
from annotate.services.bulk import LabelToImport, labels_import_batch
from annotate.services.claims import assignment_queue
from annotate.services.disputes import dispute_resolve, dispute_resolve_unresolvable
from annotate.services.finals import final_label_set
from annotate.services.labels import (
    SubmitNext,
    annotation_previous,
    annotation_submit,
    annotation_submit_next,
    label_change,
    label_import,
    label_revision_stamp,
)

__all__ = [
    "REASON_MAX_CHARS",
    "LabelToImport",
    "SubmitNext",
    "annotation_previous",
    "annotation_submit",
    "annotation_submit_next",
    "answer_validate",
    "assignment_queue",
    "dispute_resolve",
    "dispute_resolve_unresolvable",
    "final_label_set",
    "label_change",
    "label_import",
    "label_revision_stamp",
    "labels_import_batch",
]
