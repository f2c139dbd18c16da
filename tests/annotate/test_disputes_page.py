"""The disputes page at scale: paginated on plain ids, only the page's items read in
full, the count of every disputed answer still exact."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotate import selectors
from tests.annotate.gender import label_import
from tests.factories import ItemFactory, PromptFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def many_disputes(study, annotator_a, annotator_b):
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(55)]
    for item in items:
        label_import(item=item, annotator=annotator_a, value="male")
        label_import(item=item, annotator=annotator_b, value="female")
    ItemFactory(prompt=prompt)  # unlabelled: never a dispute
    return items


def test_the_disputes_page_shows_fifty_answers_a_page_and_counts_them_all(
    client_for, researcher, study, many_disputes
):
    client = client_for(researcher)
    first = client.get(reverse("annotate:disputes", args=[study.slug]))
    second = client.get(reverse("annotate:disputes", args=[study.slug]) + "?page=2")
    assert "55 answers whose labels do not settle them" in first.content.decode()
    assert len(first.context["page"].object_list) == 50
    assert [row["item"] for row in second.context["page"].object_list] == many_disputes[50:]


def test_a_page_of_the_dispute_queue_reads_only_its_items(study, many_disputes):
    pairs = selectors.dispute_pairs(study=study)
    assert [item_id for item_id, _ in pairs] == [item.pk for item in many_disputes]
    with CaptureQueriesContext(connection) as queries:
        rows = selectors.dispute_queue(study=study, item_ids=[item_id for item_id, _ in pairs[50:]])
    assert [row.item for row in rows] == many_disputes[50:]
    assert len(queries.captured_queries) <= 5  # items, images, final labels, labels, questions
