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

Cost: the labeling screen's key press (``annotation_submit_next`` behind
``annotate.views.label_submit``) is a fixed list of hand-written statements, every one of
which builds its model instances from rows instead of through the ORM, whose query building
cost more CPU than the database spent running them; the statements are all in ``annotate.sql``.
Per key press:

  1. session (Django; none when sessions are read from a shared Redis, config/settings.py)
  2. user (Django's auth)
  3. the study, the membership check and the study's questions (selectors.study_for_labeling)
  -  BEGIN
  4. item lock: UPDATE of the item counting the annotator's seat as completed, RETURNING the
     item and the membership check (locks.lock_item_for_label)
  5. seat completed, RETURNING the item's labels and its number of final labels (after the lock)
  6. the new labels                  } one statement on PostgreSQL (a data-modifying WITH)
  7. their revisions                 }
     (+ the agreed final label and its revision when the labels now agree: 2, 1 on PostgreSQL)
  8. claim probe: progress counts, the annotator's open seats, the next claimable items with
     their seats (SKIP LOCKED on PostgreSQL); every part reads a bounded number of rows (the
     claimable items are counted up to ``annotate.sql.PROGRESS_COUNT_CAP``), so its cost does not
     grow with the study (bench/bench_keypress_scale.py, tests/annotate/test_keypress_scale.py)
  9. the seat INSERT … ON CONFLICT DO NOTHING RETURNING
 10. the open seats with their items, prompts and images
  -  COMMIT

— 12 on SQLite, 11 on PostgreSQL (10 with Redis sessions), BEGIN/COMMIT included; it was 20.
A study with a gold rate (``gold``) adds two reads to every key press (its gold items, the
annotator's seats) and three writes when it hands out a gold seat; a study without one, none.
Rare paths add statements (a change or double submit re-reads the labels, a lost claim race or
a queue that the probe could not fill falls back to the search that takes held items too);
tests/annotate/test_views.py pins the common count. bench/bench_label_submit.py measures it:
1,000 images, 2 server processes x 4 threads, 2 cores at load average 0.2-1.1, the old code
measured just before the new one, old → new, p50/p95 (HTTP statements exclude BEGIN/COMMIT):

  ===============================  ============================  ==========================
  figure                           PostgreSQL 15                 SQLite 3.40
  ===============================  ============================  ==========================
  statements, in-process           20 → 11 (Redis sessions: 10)  20 → 12
  statements, HTTP (median)        18 → 9 (Redis sessions: 8)    19 → 11
  server CPU, 1 annotator          25.3/29.8 → 10.4/11.8 ms      18.7/24.3 → 9.3/12.2 ms
                                   (Redis sessions: 9.8/10.6)
  server CPU, 20 annotators        25.3/29.0 → 9.9/11.9 ms       21.8/25.5 → 10.2/11.6 ms
                                   (Redis sessions: 9.5/11.6)
  server time, 20 annotators       46.8/107.8 → 22.2/43.2 ms     24.1/73.4 → 11.2/28.6 ms
                                   (Redis sessions: 20.4/52.7)
  ===============================  ============================  ==========================

Of the remaining CPU (SQLite, in-process, tests' settings): the session and user lookups
(Django's) ~1.4 ms, the study 0.2 ms, the service ~2 ms, rendering the partial ~1 ms; the
production server spends about twice the in-process figure, which is still to be explained.
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
