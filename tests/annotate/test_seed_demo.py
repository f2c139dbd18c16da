"""seed_demo: demo users, a demo gender study that looks like a study (several images per
prompt, prompts that differ), small studies of the other protocols, idempotent (issue 2,
section 11; issue 9, item 16)."""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from annotate.management.commands.seed_demo import (
    DEMO_PASSWORDS,
    DISAGREEMENTS,
    RESOLVED,
    demo_images,
    demo_people_and_study,
)
from annotate.models import FinalLabel, Label
from annotate.selectors import dispute_queue
from studies import permissions
from studies.models import Item, ItemImage, Prompt, Study
from tests.annotate.gender import label_import

User = get_user_model()


def snapshot() -> dict[str, list]:
    return {
        "users": list(User.objects.order_by("id").values_list("id", "username", "password", "is_staff")),
        "studies": list(
            Study.objects.order_by("id").values_list("id", "slug", "name", "protocol", "labels_per_item")
        ),
        "prompts": list(Prompt.objects.order_by("id").values_list("id", "category", "word", "text")),
        "items": list(
            Item.objects.order_by("id").values_list("id", "key", "t2i_model", "metadata", "completed_seats")
        ),
        "images": list(
            ItemImage.objects.order_by("id").values_list("id", "source_path", "role", "image__sha256")
        ),
        "labels": list(
            Label.objects.order_by("id").values_list("id", "item_id", "question_id", "annotator_id", "value")
        ),
        "finals": list(FinalLabel.objects.order_by("id").values_list("id", "item_id", "value", "source")),
        "members": list(Study.annotators.through.objects.order_by("id").values_list("study_id", "user_id")),
    }


@pytest.fixture
def seeded(db, monkeypatch):
    monkeypatch.delenv("BIASLAB_DEMO_PASSWORD", raising=False)
    monkeypatch.delenv("BIASLAB_ADDR", raising=False)
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_seed_demo_twice_gives_the_same_rows_and_prints_logins(seeded, settings):
    first = snapshot()
    again = io.StringIO()
    call_command("seed_demo", stdout=again)
    assert snapshot() == first

    study = Study.objects.get(slug="demo")
    n = len(demo_images())
    assert study.items.count() == n
    assert f"Demo study 'demo' (gender): {n} items (import: 0 new, {n} already there)" in again.getvalue()
    assert "Seeded labels written now: 0." in again.getvalue()
    assert "http://127.0.0.1:8000/" in seeded
    for username, password in DEMO_PASSWORDS.items():
        assert username in seeded
        assert password in seeded
    for link in ItemImage.objects.select_related("image"):
        assert (Path(settings.MEDIA_ROOT) / link.image.file).is_file()


def test_every_prompt_has_several_images_and_both_genders_appear():
    images = demo_images()
    per_prompt = Counter((image.t2i_model, image.word) for image in images)
    assert len(per_prompt) == 6
    assert all(6 <= count <= 8 for count in per_prompt.values())
    truths = Counter(image.truth for image in images)
    assert truths["male"] >= 10
    assert truths["female"] >= 10
    assert truths["low_quality"] >= 4
    assert len({image.path for image in images}) == len(images)


def test_prompts_are_skewed_balanced_or_reversed_so_their_scores_differ():
    men: dict[tuple[str, str], int] = defaultdict(int)
    clear: dict[tuple[str, str], int] = defaultdict(int)
    for image in demo_images():
        if image.truth in ("male", "female"):
            clear[(image.t2i_model, image.word)] += 1
            men[(image.t2i_model, image.word)] += image.truth == "male"
    # Lyu et al.'s prompt bias score: |share of men - share of women| over the clear images.
    scores = {cell: abs(2 * men[cell] - clear[cell]) / clear[cell] for cell in clear}
    assert min(scores.values()) == 0.0
    assert max(scores.values()) > 0.5
    assert len(set(scores.values())) >= 3


def test_every_image_is_a_real_packaged_photo_changed_by_crop_flip_or_colour():
    sources = [image.source for image in demo_images()]
    assert all(s.startswith(("skimage.data", "matplotlib sample", "the ", "two people")) for s in sources)
    assert any("mirrored" in s for s in sources)
    assert any("cropped" in s for s in sources)
    assert any("warmer" in s or "cooler" in s for s in sources)
    assert any("Grace Hopper" in s for s in sources)
    assert any("lfw_subset" in s for s in sources)


def test_the_demo_images_are_distinct_files(seeded):
    study = Study.objects.get(slug="demo")
    shas = list(ItemImage.objects.filter(item__study=study).values_list("image__sha256", flat=True))
    assert len(shas) == len(set(shas)) == len(demo_images())
    item = Item.objects.get(study=study, key=demo_images()[0].path)
    assert item.metadata["source"] == demo_images()[0].source


def test_labels_are_seeded_with_disputes_and_one_prompt_left_to_label(seeded):
    study = Study.objects.get(slug="demo")
    left = [image.path for image in demo_images() if image.labels is None]
    assert len(left) == 7
    assert not Label.objects.filter(item__key__in=left).exists()
    annotator = User.objects.get(username="demo-annotator-1")
    assert Label.objects.filter(item__study=study, annotator=annotator).count() == len(demo_images()) - 7
    disputed = {row.item.key for row in dispute_queue(study=study)}
    assert disputed == (set(DISAGREEMENTS) - set(RESOLVED)) | {
        image.path for image in demo_images() if image.labels == ("female", "male")
    }
    resolved = FinalLabel.objects.get(item__key=next(iter(RESOLVED)))
    assert (resolved.value, resolved.source, resolved.decided_by.username) == (
        "low_quality",
        "resolved",
        "demo-researcher",
    )
    other = Label.objects.get(item__key="demo-model-a/nurse_low_quality.jpg", value="other")
    assert other.reason


def test_a_label_changed_by_hand_survives_a_rerun(seeded):
    study = Study.objects.get(slug="demo")
    item = Item.objects.get(study=study, key=demo_images()[1].path)
    annotator = User.objects.get(username="demo-annotator-2")
    before = Label.objects.get(item=item, annotator=annotator).value
    changed = "female" if before != "female" else "male"
    label_import(item=item, annotator=annotator, value=changed)
    call_command("seed_demo", stdout=io.StringIO())
    assert Label.objects.get(item=item, annotator=annotator).value == changed


def test_the_other_protocols_have_small_demo_studies(seeded):
    attributes = Study.objects.get(slug="demo-attributes")
    pairs = Study.objects.get(slug="demo-pairs")
    assert (attributes.protocol, attributes.questions.count(), attributes.labels_per_item) == (
        "attributes",
        15,
        2,
    )
    assert (pairs.protocol, pairs.labels_per_item) == ("pair_change", 2)
    assert attributes.items.count() >= 3
    assert attributes.items.filter(completed_seats=2).exists()
    assert attributes.items.filter(completed_seats=0).exists()
    for pair in pairs.items.all():
        assert {link.role for link in pair.item_images.all()} == {"input", "output"}
    assert pairs.items.filter(completed_seats=2).exists()
    assert FinalLabel.objects.filter(item__study=pairs, question__key="skin", value="darker").exists()
    annotators = set(User.objects.filter(username__startswith="demo-annotator"))
    for study in (attributes, pairs, Study.objects.get(slug="demo")):
        assert set(study.annotators.all()) == annotators


def test_demo_users_have_their_roles_and_passwords(db, monkeypatch):
    monkeypatch.delenv("BIASLAB_DEMO_PASSWORD", raising=False)
    study = demo_people_and_study()
    admin = User.objects.get(username="demo-admin")
    assert permissions.is_admin(admin)
    assert permissions.is_researcher(User.objects.get(username="demo-researcher"))
    annotators = [User.objects.get(username=f"demo-annotator-{n}") for n in (1, 2)]
    assert all(permissions.is_annotator(u) for u in annotators)
    assert set(study.annotators.all()) == set(annotators)
    assert admin.check_password(DEMO_PASSWORDS["demo-admin"])
    assert study.description.startswith("Label the gender presentation")


def test_the_demo_password_can_come_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("BIASLAB_DEMO_PASSWORD", "my-own-secret-1")
    demo_people_and_study()
    assert User.objects.get(username="demo-annotator-1").check_password("my-own-secret-1")
    assert not User.objects.get(username="demo-annotator-1").check_password(
        DEMO_PASSWORDS["demo-annotator-1"]
    )
