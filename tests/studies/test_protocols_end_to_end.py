"""One study of each protocol from start to finish: created with ``create_study``,
imported with ``import_images`` (one-image items, or seed/edit pairs), labelled through the
labelling services or ``import_labels``, agreed or disputed per question, a dispute settled,
exported with ``export_ground_truth``, and rebuilt in an empty database from the manifest and
the export alone — whose export is then byte for byte the same."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotate import services
from annotate.models import FinalLabel, ItemState
from annotate.selectors import item_question_states
from studies.models import Item, Question, Study
from tests.studies.protocol_data import empty_database, one_image_manifest, pair_manifest, write_csv

User = get_user_model()
pytestmark = pytest.mark.django_db


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        raise AssertionError(f"{name} failed: {exc}\n{out.getvalue()}") from exc
    return out.getvalue()


def label_through_the_queue(
    study: Study, usernames: list[str], answers: Callable[[Item, int], dict[str, str]]
) -> None:
    """Each annotator takes the items the queue hands out, one by one, and answers every
    question the way ``answers(item, annotator_number)`` says — the labelling screen's path."""
    annotators = [User.objects.get_or_create(username=name)[0] for name in usernames]
    study.annotators.add(*annotators)
    for number, annotator in enumerate(annotators):
        while seats := services.assignment_queue(study=study, annotator=annotator, size=1):
            item = seats[0].item
            given = answers(item, number)
            reasons = {key: "a drawing, not a photo" for key, value in given.items() if value == "other"}
            services.annotation_submit(item=item, annotator=annotator, answers=given, reasons=reasons)


def states(study: Study) -> dict[str, dict[str, str]]:
    return {item.key: item_question_states(item) for item in Item.objects.filter(study=study).order_by("id")}


def export_to(path: Path, slug: str) -> str:
    command("export_ground_truth", "--study", slug, "--output", str(path))
    return path.read_text(encoding="utf-8")


def export_and_rebuild(tmp_path: Path, settings, definition: list[str], manifest: Path, root: Path) -> str:
    """The study's export, once rebuilding the study in an empty database with the commands alone
    (from ``manifest`` and that export) has given the same export byte for byte."""
    slug = definition[0]
    export = tmp_path / "export.csv"
    before = export_to(export, slug)
    empty_database(settings, tmp_path)
    command("create_study", *definition)
    command("import_images", "--manifest", str(manifest), "--root", str(root), "--study", slug)
    command("import_labels", str(export), "--study", slug)
    command("import_ground_truth", str(export), "--study", slug)
    assert export_to(tmp_path / "again.csv", slug) == before
    return before


def test_a_gender_study_end_to_end(tmp_path, settings):
    definition = ["lyu", "--protocol", "gender", "--name", "Lyu et al. replication"]
    assert command("create_study", *definition).startswith("Created study 'lyu' (gender, 1 question(s)")
    manifest, root = one_image_manifest(tmp_path, 8)
    assert "accepted: 8 images" in command(
        "import_images", "--manifest", str(manifest), "--root", str(root), "--study", "lyu"
    )
    study = Study.objects.get(slug="lyu")
    first = ["male", "female", "male", "other", "low_quality", "female", "male", "female"]
    second = ["male", "female", "female", "other", "low_quality", "male", "male", "female"]
    label_through_the_queue(
        study, ["anna", "ben"], lambda item, n: {"gender": (first, second)[n][int(item.key.split(".")[0])]}
    )
    found = states(study)
    assert found["0.png"] == {"gender": ItemState.AGREED}
    assert found["2.png"] == found["5.png"] == {"gender": ItemState.DISPUTED}
    rita = User.objects.create_user("rita")
    question = Question.objects.get(study=study)
    services.dispute_resolve(
        item=Item.objects.get(key="2.png"), question=question, researcher=rita, value="male"
    )
    assert item_question_states(Item.objects.get(key="2.png")) == {"gender": ItemState.RESOLVED}
    assert FinalLabel.objects.get(item__key="3.png").value == "other"

    before = export_and_rebuild(tmp_path, settings, definition, manifest, root)
    assert "a drawing, not a photo" in before
    assert Study.objects.get(slug="lyu").name == "Lyu et al. replication"


def test_an_attributes_study_end_to_end(tmp_path, settings):
    definition = ["gep", "--protocol", "attributes", "--labels-per-item", "4", "--agreement", "majority"]
    command("create_study", *definition)
    manifest, root = one_image_manifest(
        tmp_path, 3, extra={"questions": ["", "hat boots", ""], "setting": ["office", "", "street"]}
    )
    command("import_images", "--manifest", str(manifest), "--root", str(root), "--study", "gep")
    study = Study.objects.get(slug="gep")
    assert Item.objects.get(study=study, key="1.png").question_keys == ["hat", "boots"]
    assert Item.objects.get(study=study, key="2.png").metadata == {"setting": "street"}

    def answers(item: Item, n: int) -> dict[str, str]:
        # Annotators 0 and 1 see a hat, 2 and 3 do not (a 2-2 tie); all four see boots on
        # item 0 and 2; the other toggles are left to their default "no".
        given = {"hat": "yes" if n < 2 else "no"}
        if item.key != "1.png":
            given["boots"] = "yes"
        if n == 3 and item.key == "0.png":
            given["tie"] = "yes"
        return given

    label_through_the_queue(study, ["anna", "ben", "cleo", "dan"], answers)
    found = states(study)
    assert found["1.png"] == {"boots": ItemState.AGREED, "hat": ItemState.DISPUTED}
    assert found["0.png"]["hat"] == ItemState.DISPUTED
    assert found["0.png"]["boots"] == found["0.png"]["tie"] == ItemState.AGREED
    assert len(found["0.png"]) == 15
    tie = FinalLabel.objects.get(item__key="0.png", question__key="tie")
    assert (tie.value, tie.note) == ("no", "3 of 4 annotators chose “no”.")
    rita = User.objects.create_user("rita")
    hat = Question.objects.get(study=study, key="hat")
    services.dispute_resolve(
        item=Item.objects.get(key="0.png"), question=hat, researcher=rita, value="yes", note="a cap"
    )

    before = export_and_rebuild(tmp_path, settings, definition, manifest, root)
    assert before.count("\n") == 1 + 15 + 2 + 15


def test_a_pair_change_study_end_to_end(tmp_path, settings):
    definition = ["painter", "--protocol", "pair_change"]
    command("create_study", *definition)
    manifest, root = pair_manifest(tmp_path, 3)
    assert "accepted: 6 images" in command(
        "import_images", "--manifest", str(manifest), "--root", str(root), "--study", "painter"
    )
    study = Study.objects.get(slug="painter")
    pair = Item.objects.get(study=study, key="pair_00")
    assert {link.role: link.source_path for link in pair.item_images.all()} == {
        "input": "seeds/person_0.png",
        "output": "edits/0.png",
    }
    # Imported pairs wait out of the queue for a sampling round (sample_pairs, which needs
    # measurements: tests/detectors/test_sample_pairs.py); here people check every pair.
    assert set(Item.objects.filter(study=study).values_list("queue", flat=True)) == {0}
    Item.objects.filter(study=study).update(queue=1)
    ages = {"pair_00": ("older", "older"), "pair_01": ("same", "younger"), "pair_02": ("younger", "younger")}
    label_through_the_queue(
        study,
        ["anna", "ben"],
        lambda item, n: {"age": ages[item.key][n], "gender": "female_female", "skin": ("darker", "same")[n]},
    )
    found = states(study)
    assert found["pair_00"] == {
        "age": ItemState.AGREED,
        "gender": ItemState.AGREED,
        "skin": ItemState.DISPUTED,
    }
    assert found["pair_01"]["age"] == ItemState.DISPUTED
    rita = User.objects.create_user("rita")
    age = Question.objects.get(study=study, key="age")
    services.dispute_resolve(
        item=Item.objects.get(key="pair_01"), question=age, researcher=rita, value="younger"
    )

    before = export_and_rebuild(tmp_path, settings, definition, manifest, root)
    assert before.splitlines()[0].startswith("item,question,image,input_image,output_image,")
    assert Item.objects.get(key="pair_01").item_images.get(role="input").source_path == "seeds/person_1.png"


def test_an_objects_study_end_to_end(tmp_path, settings):
    definition = ["cooccur", "--protocol", "objects"]
    command("create_study", *definition)
    manifest, root = one_image_manifest(tmp_path, 3, extra={"gender": ["male", "female", "male"]})
    command("import_images", "--manifest", str(manifest), "--root", str(root), "--study", "cooccur")
    labels = write_csv(
        tmp_path / "labels.csv",
        ["item", "question", "annotator", "label"],
        [
            [key, question, annotator, label]
            for key, question, anna, ben in (
                ("0.png", "boxes", "yes,no,yes", "yes,no,yes"),
                ("0.png", "missed", "dog, umbrella", "dog"),
                ("1.png", "boxes", "yes", "no"),
                ("1.png", "missed", "", ""),
            )
            for annotator, label in (("anna", anna), ("ben", ben))
        ],
    )
    assert "accepted: 8 labels" in command("import_labels", str(labels), "--study", "cooccur")
    study = Study.objects.get(slug="cooccur")
    found = states(study)
    assert found["0.png"] == {"boxes": ItemState.AGREED, "missed": ItemState.DISPUTED}
    assert found["1.png"] == {"boxes": ItemState.DISPUTED, "missed": ItemState.AGREED}
    assert FinalLabel.objects.get(item__key="0.png", question__key="boxes").value == "yes,no,yes"
    rita = User.objects.create_user("rita")
    missed = Question.objects.get(study=study, key="missed")
    services.dispute_resolve(
        item=Item.objects.get(key="0.png"), question=missed, researcher=rita, value="dog,umbrella"
    )

    before = export_and_rebuild(tmp_path, settings, definition, manifest, root)
    assert '"dog,umbrella"' in before
