"""seed_demo: demo users, a demo study of packaged photos, idempotent (issue 2, section 11)."""

from __future__ import annotations

import io
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command

from annotate import roles
from annotate.management.commands.seed_demo import DEMO_PASSWORDS, demo_images, demo_people_and_study
from annotate.models import Image, Prompt, Study

User = get_user_model()


def snapshot() -> dict[str, list]:
    return {
        "users": list(User.objects.order_by("id").values_list("id", "username", "password", "is_staff")),
        "studies": list(Study.objects.values_list("id", "slug", "name")),
        "prompts": list(Prompt.objects.order_by("id").values_list("id", "category", "word", "text")),
        "images": list(Image.objects.order_by("id").values_list("id", "source_path", "sha256", "t2i_model")),
        "members": list(Study.annotators.through.objects.order_by("id").values_list("study_id", "user_id")),
    }


def test_seed_demo_twice_gives_the_same_rows_and_prints_logins(db, settings, monkeypatch):
    monkeypatch.delenv("BIASLAB_DEMO_PASSWORD", raising=False)
    monkeypatch.delenv("BIASLAB_ADDR", raising=False)
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    first = snapshot()
    again = io.StringIO()
    call_command("seed_demo", stdout=again)
    assert snapshot() == first

    study = Study.objects.get(slug="demo")
    assert study.images.count() == len(demo_images())
    assert f"0 new, {len(demo_images())} already there" in again.getvalue()
    text = out.getvalue()
    assert "http://127.0.0.1:8000/" in text
    for username, password in DEMO_PASSWORDS.items():
        assert f"{username}" in text
        assert password in text
    for image in study.images.all():
        assert (Path(settings.MEDIA_ROOT) / image.file).is_file()


def test_demo_study_covers_clear_people_and_every_low_quality_case(db):
    categories = {item.category for item in demo_images()}
    assert categories == {"clear person", "face crop", "no person", "two people", "heavy blur"}
    assert {item.t2i_model for item in demo_images()} == {"demo-photos", "demo-derived"}


def test_demo_users_have_their_roles_and_passwords(db, monkeypatch):
    monkeypatch.delenv("BIASLAB_DEMO_PASSWORD", raising=False)
    study = demo_people_and_study()
    admin = User.objects.get(username="demo-admin")
    assert roles.is_admin(admin)
    assert roles.is_researcher(User.objects.get(username="demo-researcher"))
    annotators = [User.objects.get(username=f"demo-annotator-{n}") for n in (1, 2)]
    assert all(roles.is_annotator(u) for u in annotators)
    assert set(study.annotators.all()) == set(annotators)
    assert admin.check_password(DEMO_PASSWORDS["demo-admin"])


def test_the_demo_password_can_come_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("BIASLAB_DEMO_PASSWORD", "my-own-secret-1")
    demo_people_and_study()
    assert User.objects.get(username="demo-annotator-1").check_password("my-own-secret-1")
    assert not User.objects.get(username="demo-annotator-1").check_password(
        DEMO_PASSWORDS["demo-annotator-1"]
    )
