"""Schemathesis hooks for ``test_schemathesis.py``, loaded by the ``st`` process it starts
(``hooks`` in ``schemathesis.toml``).

The allow-list. Schemathesis' ``positive_data_acceptance`` fails when a request the schema
allows is refused with a 400. A few rules of BiasLab cannot be written in a schema because they
depend on the study's data, not on the request's shape: the answers a question allows are the
question's choices (a different list for every study and question), a question key must be one
the item asks, a filter value must exist in the study, credentials must belong to a user.
Those 400s carry their own error ``code``; this check accepts a 400 from a schema-valid request
only with one of the codes listed for that operation, and runs the built-in check otherwise.
Any other 400 — a type, a length, a required field, an unknown field — still fails the run.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

#: operation → the error codes of rules the schema cannot express, each with why.
DATA_RULES: dict[str, frozenset[str]] = {
    # A username and password are strings to the schema; whether they log in is data.
    "POST /api/token/": frozenset({"invalid_credentials"}),
    # value: one of the item's question's choices; question: a key the item asks; an item that
    # asks several questions needs `question` (or `answers`) — per study, per item.
    "POST /api/labels/": frozenset({"invalid_answer", "unknown_question", "question_required"}),
    "PUT /api/labels/{id}/": frozenset({"invalid_answer"}),
    "PATCH /api/labels/{id}/": frozenset({"invalid_answer"}),
    "POST /api/disputes/{id}/resolve/": frozenset(
        {"invalid_answer", "unknown_question", "question_required"}
    ),
    # t2i_model / category: values that exist in the study (the 400 names them).
    "GET /api/items/": frozenset({"unknown_filter"}),
    "GET /api/images/": frozenset({"unknown_filter"}),
    # …and question: a key of the study's questions.
    "GET /api/agreement/": frozenset({"unknown_filter", "unknown_question"}),
    # study: a slug that exists.
    "GET /api/predictions/": frozenset({"unknown_filter"}),
    # A round needs a gender study that exists, a detector with predictions in it, a budget no
    # larger than its unlabelled images, no round still waiting for labels, and (active) an
    # earlier round: all the study's data.
    "POST /api/sampling-rounds/": frozenset(
        {"unknown_study", "not_estimable", "unknown_detector", "sampling_refused"}
    ),
    "GET /api/estimates/": frozenset({"not_estimable", "unknown_detector"}),
}


def _error_code(response: Any) -> str | None:
    try:
        body = json.loads(response.content)
    except (ValueError, TypeError):
        return None
    return body.get("code") if isinstance(body, dict) else None


@schemathesis.check
def positive_data_acceptance_beyond_data_rules(ctx: Any, response: Any, case: Any) -> bool | None:
    """``positive_data_acceptance``, except for the 400s of ``DATA_RULES``."""
    if response.status_code == 400 and _error_code(response) in DATA_RULES.get(case.operation.label, ()):
        return None
    return positive_data_acceptance(ctx, response, case)
