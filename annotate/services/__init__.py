"""Writes of the human side: handing out items, saving answers, deciding final labels.

Every function here is one transaction, takes keyword-only arguments and raises the domain
errors of ``annotate.errors`` with a message meant for the user. Every write that changes a
label or a final label appends a revision row recording who and when, so nothing is lost.

One module per concern; this package's names are the public ones, import them from here:

- ``claims``: seats and claims — ``assignment_queue``, the one claim path;
- ``labels``: answers saved — ``annotation_submit``, ``annotation_submit_next`` (the key
  press), ``label_change``, ``annotation_previous``, ``label_import``;
- ``finals``: final labels — agreed ones follow the labels, ``final_label_set``;
- ``disputes``: a researcher's decision — ``dispute_resolve``, ``dispute_resolve_unresolvable``;
- ``answers``: the checks of an answer (``answer_validate``), ``locks``: membership and the
  item lock every label writer takes first.

The key press (``labels.annotation_submit_next``) is a fixed list of hand-written statements
in ``annotate.sql``; docs/explanation/key-press.md lists them.
A study with a gold rate adds two reads to every key press (its gold items, the annotator's seats)
and three writes when it hands out a gold seat; a study without one, none.
"""

from __future__ import annotations

from annotate.services.answers import DURATION_MAX_MS, REASON_MAX_CHARS, answer_validate
from annotate.services.bulk import LabelToImport, labels_import_batch
from annotate.services.claims import CLAIM_SPARE_CANDIDATES, SeatRow, assignment_queue
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
    "CLAIM_SPARE_CANDIDATES",
    "DURATION_MAX_MS",
    "REASON_MAX_CHARS",
    "LabelToImport",
    "SeatRow",
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
