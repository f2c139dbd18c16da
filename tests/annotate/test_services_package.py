"""``annotate.services`` split by concern, with one claim path and every statement
of the key press written out in ``annotate.sql``. The public names stay importable from
``annotate.services``; the key-press statement counts are pinned in test_views.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotate import services
from annotate.models import Assignment
from studies.models import Item

ROOT = Path(__file__).resolve().parents[2]

# Public name → the module of its concern.
HOMES = {
    "assignment_queue": "claims",
    "annotation_submit": "labels",
    "annotation_submit_next": "labels",
    "label_change": "labels",
    "label_import": "labels",
    "label_revision_stamp": "labels",
    "annotation_previous": "labels",
    "SubmitNext": "labels",
    "final_label_set": "finals",
    "dispute_resolve": "disputes",
    "dispute_resolve_unresolvable": "disputes",
    "answer_validate": "answers",
}


@pytest.mark.parametrize(("name", "module"), sorted(HOMES.items()))
def test_each_public_name_is_importable_from_annotate_services_and_lives_with_its_concern(name, module):
    assert getattr(services, name).__module__ == f"annotate.services.{module}"
    assert name in services.__all__


SQL_TEXT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b|\bRETURNING\b|\bON CONFLICT\b")


def _sql_literals(path: Path) -> list[str]:
    """String literals of ``path`` that are SQL text (docstrings apart: they may name a statement)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.strip()[:60]!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and SQL_TEXT.search(node.value)
    ]


def test_the_key_press_sql_is_written_out_in_annotate_sql_only():
    readers = [ROOT / "annotate" / "selectors.py", *sorted((ROOT / "annotate" / "services").glob("*.py"))]
    assert readers[1:], "annotate.services is a package"
    found = [literal for path in readers for literal in _sql_literals(path)]
    assert not found, "\n".join(found)
    assert _sql_literals(ROOT / "annotate" / "sql.py"), "the checker sees SQL where it is"


def _seat_inserts(queries: list[dict[str, str]]) -> int:
    table = Assignment._meta.db_table
    return sum(1 for q in queries if re.match(rf'\s*INSERT INTO "?{table}"?', q["sql"]))


def test_the_full_search_claims_all_its_seats_with_one_insert(study, annotator_a, make_items):
    """A sampling round whose own items ran out hands over to the search of the other level:
    it takes the same claim path as the key press (one INSERT … ON CONFLICT for all the seats),
    no longer one INSERT and one read-back per item."""
    items = make_items(3)
    study.priority_queue = True
    study.save(update_fields=["priority_queue"])
    with CaptureQueriesContext(connection) as captured:
        seats = services.assignment_queue(study=study, annotator=annotator_a, size=3)
    assert [seat.item for seat in seats] == items
    assert _seat_inserts(captured.captured_queries) == 1


def test_the_search_frees_abandoned_seats_and_takes_their_slots(study, annotator_a, annotator_b, make_items):
    """The one claim path frees a seat reserved and never labelled past its expiry, in the
    search as in the probe."""
    from datetime import timedelta

    from django.utils import timezone

    items = make_items(2)
    services.assignment_queue(study=study, annotator=annotator_b, size=2)
    Assignment.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    study.labels_per_item = 1
    study.priority_queue = True
    study.save(update_fields=["labels_per_item", "priority_queue"])
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    assert [seat.item for seat in seats] == items
    assert set(Assignment.objects.values_list("annotator__username", flat=True)) == {annotator_a.username}
    assert list(Item.objects.order_by("id").values_list("completed_seats", flat=True)) == [0, 0]
