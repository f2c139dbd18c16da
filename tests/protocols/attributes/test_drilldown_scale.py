"""The attribute drill-down of a setting holding more images than one statement may name: the
groups are counted and their shown images chosen in SQL, and only those are read, a chunk at a
time. Sizes are pinned small (SQLite's own limit lowered on the test connection, the chunks
cut to match)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from annotate.models import FinalLabel, FinalLabelSource, Label
from detectors.kinds import KIND_ATTRIBUTES
from protocols.attributes.views import GROUP_LIMIT
from studies.models import Item, ItemImage, Question
from tests.factories import PredictionFactory, image_of
from tests.reports import attributes_data as data
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

pytestmark = pytest.mark.django_db

N_WOMEN, N_MEN = 130, 20


@pytest.fixture
def gep(settings, annotator_a):
    """150 neutral sdxl images sharing one file scored by clip: 130 women's with anna's answer
    and the final answer yes to boots, 20 men's with neither; their index runs against their
    id."""
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    study = data.attributes_study()
    first = data.gep_item(study, "sdxl", "woman", "neutral")
    PredictionFactory(
        image=image_of(first),
        detector="clip",
        version="1",
        kind=KIND_ATTRIBUTES,
        output={"scores": {"boots": 0.9}},
    )
    rest = Item.objects.bulk_create(
        [
            Item(
                study=study,
                prompt=first.prompt,
                key=f"gep/{n:03d}.png",
                t2i_model="sdxl",
                index=N_WOMEN + N_MEN - n,
                metadata={"gender": "woman" if n < N_WOMEN else "man", "setting": "neutral"},
            )
            for n in range(1, N_WOMEN + N_MEN)
        ]
    )
    ItemImage.objects.bulk_create(
        [ItemImage(item=item, image=image_of(first), role="image", source_path=item.key) for item in rest]
    )
    items = [first, *rest]
    boots = Question.objects.get(study=study, key="boots")
    FinalLabel.objects.bulk_create(
        [
            FinalLabel(
                item=item,
                question=boots,
                value="yes",
                source=FinalLabelSource.IMPORTED,
                decided_at=timezone.now(),
            )
            for item in items[:N_WOMEN]
        ]
    )
    Label.objects.bulk_create(
        [Label(item=item, question=boots, annotator=annotator_a, value="yes") for item in items[:N_WOMEN]]
    )
    return items


@pytest.fixture
def disputed(gep, annotator_a, annotator_b, annotator_c):
    """Every image with three answers to dress and no final one: 150 disputes."""
    dress = Question.objects.get(study=gep[0].study, key="dress")
    Label.objects.bulk_create(
        [
            Label(item=item, question=dress, annotator=annotator, value=value)
            for item in gep
            for annotator, value in ((annotator_a, "yes"), (annotator_b, "no"), (annotator_c, "yes"))
        ]
    )
    return gep


def _group(html: str, group: str) -> str:
    return html.split(f'id="group-{group}"')[1].split("</section>")[0]


def _shown(html: str) -> list[int]:
    return [int(part.split('"')[0]) for part in html.split('data-item-id="')[1:]]


def test_a_setting_of_more_images_than_an_in_list_may_hold_shows_each_group_read_under_the_limit(
    gep, researcher, client_for
):
    """SQLite's own limit at 120: fewer than the 150 images of the setting, which the page
    once read whole (and with them their answers, images and scores) to show 120 of a group."""
    client = client_for(researcher)
    with sqlite_variable_limit(120):
        response = client.get(reverse("reports:attribute", args=["boots", "neutral"]), {"study": "gep"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "150 images count for this attribute" in html
    women = sorted(gep[:N_WOMEN], key=lambda item: (item.index, item.pk))
    yes = _group(html, "sdxl-woman-yes")
    assert "(130)" in yes
    assert _shown(yes) == [item.pk for item in women[:GROUP_LIMIT]]
    assert f"… and {N_WOMEN - GROUP_LIMIT} more." in yes
    for shown in ('anna</span>: <span class="tag">yes', 'final: <span class="tag">yes', "clip: 0.900"):
        assert yes.count(shown) == GROUP_LIMIT
    assert "No image." in _group(html, "sdxl-woman-no")
    men = _group(html, "sdxl-man-none")
    assert "(20)" in men
    assert _shown(men) == [item.pk for item in sorted(gep[N_WOMEN:], key=lambda item: (item.index, item.pk))]
    assert "more." not in men


def test_the_dispute_queue_of_an_attribute_lists_more_disputes_than_an_in_list_may_hold(
    disputed, researcher, client_for
):
    """The page's dispute queue is every disputed image of the study, each with its images."""
    client = client_for(researcher)
    with sqlite_variable_limit(120):
        response = client.get(reverse("reports:attribute", args=["dress", "neutral"]), {"study": "gep"})
    assert response.status_code == 200
    disputes = response.content.decode().split('id="disputes"')[1]
    for item in disputed:
        assert reverse("annotate:dispute_question", args=[item.pk, "dress"]) in disputes
    row = disputes.split("<tbody>")[1].split("</tr>")[0]
    assert 'anna: <span class="tag">yes</span> · ben: <span class="tag">no</span>' in row
