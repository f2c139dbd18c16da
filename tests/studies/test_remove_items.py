"""``remove_items`` and its backup ("Removing items"): unlabelled items go at once,
items holding work are refused unless --with-labels and then backed up first, files no item uses
leave MEDIA_ROOT, and ``import_images --restore`` brings everything back."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from annotate import services
from annotate.exports import ground_truth_export
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, Label, LabelRevision
from detectors.models import Prediction
from estimates.models import RoundItem, SamplingRound
from studies.ingest import images_import
from studies.models import Image, Item, ItemChange, ItemImage, Study
from tests.annotate.gender import resolve, submit
from tests.factories import PredictionFactory, StudyFactory, image_of, png_bytes
from tests.studies.test_ingest import row, write_manifest

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "images" / "sdxl"
    folder.mkdir(parents=True)
    for n in range(4):
        (folder / f"{n}.png").write_bytes(png_bytes(n))
    return folder.parent


@pytest.fixture
def imported(study, root, tmp_path) -> dict[str, Item]:
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(4)])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert summary.accepted == 4
    return {item.key: item for item in Item.objects.filter(study=study)}


@pytest.fixture
def labelled(imported, annotator_a, annotator_b, researcher) -> dict[str, Item]:
    """sdxl/0.png agreed, sdxl/1.png disputed then resolved, sdxl/2.png with a prediction and
    a sampling-round entry, sdxl/3.png untouched."""
    for annotator, values in ((annotator_a, ("male", "male")), (annotator_b, ("male", "female"))):
        services.assignment_queue(study=imported["sdxl/0.png"].study, annotator=annotator)
        for key, value in zip(("sdxl/0.png", "sdxl/1.png"), values, strict=True):
            submit(item=imported[key], annotator=annotator, value=value)
    resolve(item=imported["sdxl/1.png"], researcher=researcher, value="female", note="long hair")
    PredictionFactory(image=image_of(imported["sdxl/2.png"]))
    sampling = SamplingRound.objects.create(
        study=imported["sdxl/2.png"].study,
        number=1,
        detector="fake",
        detector_version="1",
        design="uniform",
        seed=1,
        budget=1,
        n_selected=1,
    )
    RoundItem.objects.create(round=sampling, item=imported["sdxl/2.png"], pi=0.5, selected=True)
    return imported


def remove(*args: str) -> str:
    out = io.StringIO()
    call_command("remove_items", *args, stdout=out)
    return out.getvalue()


def media(settings) -> set[str]:
    return {
        str(p.relative_to(settings.MEDIA_ROOT)) for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()
    }


def test_an_unlabelled_item_goes_at_once_with_its_file(
    imported, settings, django_capture_on_commit_callbacks
):
    gone = image_of(imported["sdxl/3.png"])
    with django_capture_on_commit_callbacks(execute=True):
        out = remove("--study", "gender", "--item", "sdxl/3.png")
    assert "Removed 1 item(s) from study 'gender': sdxl/3.png" in out
    assert "files removed from MEDIA_ROOT: 1" in out
    assert not Item.objects.filter(key="sdxl/3.png").exists()
    assert not Image.objects.filter(pk=gone.pk).exists()
    assert gone.file not in media(settings)
    assert len(media(settings)) == 3
    change = ItemChange.objects.get()
    assert (change.item_key, change.action, change.item) == ("sdxl/3.png", "removed", None)


def test_a_file_another_study_still_uses_stays(
    imported, root, tmp_path, settings, django_capture_on_commit_callbacks
):
    other = StudyFactory(slug="other", name="Other")
    images_import(
        study=other, manifest_path=write_manifest(tmp_path / "o.csv", [row("sdxl/3.png")]), root=root
    )
    kept = image_of(imported["sdxl/3.png"])
    with django_capture_on_commit_callbacks(execute=True):
        out = remove("--study", "gender", "--item", "sdxl/3.png")
    assert "files removed from MEDIA_ROOT: 0" in out
    assert Image.objects.filter(pk=kept.pk).exists()
    assert kept.file in media(settings)
    assert Item.objects.filter(study=other).count() == 1


def test_items_holding_work_are_refused_by_name_and_nothing_is_removed(labelled, settings):
    files = media(settings)
    with pytest.raises(CommandError) as refused:
        remove("--study", "gender", "--item", "sdxl/0.png", "sdxl/1.png", "sdxl/2.png", "sdxl/3.png")
    message = str(refused.value)
    assert "3 item(s) of the study 'gender' have labels, predictions or sampling rounds" in message
    assert "sdxl/0.png (2 labels, 1 final label" in message
    assert "sdxl/2.png (" in message
    assert "1 prediction" in message
    assert "1 round item" in message
    assert "sdxl/3.png" not in message.split(":", 1)[1].split("Nothing")[0]
    assert "--with-labels" in message
    assert Item.objects.count() == 4
    assert Label.objects.count() == 4
    assert media(settings) == files
    assert not ItemChange.objects.exists()


def test_unknown_items_are_refused_by_name(imported):
    with pytest.raises(
        CommandError, match=r"not items of the study 'gender': sdxl/9\.png, nope; nothing was removed"
    ):
        remove("--study", "gender", "--item", "sdxl/0.png", "sdxl/9.png", "nope")
    assert Item.objects.count() == 4


def test_an_unknown_study_is_refused_naming_the_nearest(imported):
    with pytest.raises(CommandError, match=r"No study with slug 'gendr'.*did you mean 'gender'\?"):
        remove("--study", "gendr", "--item", "sdxl/0.png")


def test_a_dry_run_removes_nothing(labelled, settings):
    files = media(settings)
    out = remove("--study", "gender", "--item", "sdxl/0.png", "sdxl/2.png", "--with-labels", "--dry-run")
    assert "Would remove 2 item(s)" in out
    assert "2 labels" in out
    assert "1 prediction" in out
    assert "dry run: nothing was removed" in out
    assert Item.objects.count() == 4
    assert Prediction.objects.count() == 1
    assert media(settings) == files


def test_removing_with_labels_backs_everything_up_and_restore_brings_it_all_back(
    labelled, study, tmp_path, settings, django_capture_on_commit_callbacks
):
    export_before = ground_truth_export(study=study, fmt="csv")
    counts_before = {
        model.__name__: model.objects.count()
        for model in (
            Item,
            ItemImage,
            Image,
            Label,
            LabelRevision,
            FinalLabel,
            FinalLabelRevision,
            Assignment,
        )
    }
    ids_before = sorted(Item.objects.values_list("pk", "key"))
    files_before = {name: (Path(settings.MEDIA_ROOT) / name).read_bytes() for name in media(settings)}
    backup = tmp_path / "backup" / "removed.json"
    manifest = write_manifest(tmp_path / "rm.csv", [row(f"sdxl/{n}.png", n) for n in range(4)])
    with django_capture_on_commit_callbacks(execute=True):
        out = remove(
            "--study", "gender", "--manifest", str(manifest), "--with-labels", "--backup", str(backup)
        )
    assert "Removed 4 item(s)" in out
    assert f"Backup written to {backup}" in out
    assert f"import_images --study gender --restore {backup}" in out
    assert "files removed from MEDIA_ROOT: 4" in out
    assert not Item.objects.exists()
    for model in (Label, FinalLabel, Assignment, Prediction, RoundItem, Image):
        assert not model.objects.exists(), model.__name__
    assert media(settings) == set()
    assert SamplingRound.objects.count() == 1  # the round itself stays
    document = json.loads(backup.read_text(encoding="utf-8"))
    assert document["study"] == "gender"
    assert sorted(document["items"]) == [f"sdxl/{n}.png" for n in range(4)]
    assert {r["model"] for r in document["rows"]} >= {
        "studies.item",
        "studies.image",
        "annotate.label",
        "annotate.finallabel",
        "detectors.prediction",
        "estimates.rounditem",
    }
    assert ItemChange.objects.filter(action="removed").count() == 4

    out = io.StringIO()
    call_command("import_images", study="gender", restore=str(backup), stdout=out)
    assert "Restored 4 item(s) into study 'gender'" in out.getvalue()
    assert sorted(Item.objects.values_list("pk", "key")) == ids_before
    for model in (Item, ItemImage, Image, Label, LabelRevision, FinalLabel, FinalLabelRevision, Assignment):
        assert model.objects.count() == counts_before[model.__name__], model.__name__
    assert Prediction.objects.count() == 1
    assert RoundItem.objects.get().item.key == "sdxl/2.png"
    assert {name: (Path(settings.MEDIA_ROOT) / name).read_bytes() for name in media(settings)} == files_before
    assert ground_truth_export(study=Study.objects.get(slug="gender"), fmt="csv") == export_before
    # Restoring twice is refused: the items are there again.
    with pytest.raises(CommandError, match="the study has these items again"):
        call_command("import_images", study="gender", restore=str(backup), stdout=io.StringIO())


def test_a_backup_that_cannot_be_written_removes_nothing(labelled, tmp_path, settings):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CommandError, match="cannot write the backup file"):
        remove(
            "--study", "gender", "--item", "sdxl/0.png", "--with-labels", "--backup", str(blocker / "b.json")
        )
    assert Item.objects.count() == 4
    assert Label.objects.count() == 4
    assert not ItemChange.objects.exists()


def test_an_existing_backup_file_is_never_overwritten(labelled, tmp_path):
    backup = tmp_path / "b.json"
    backup.write_text("{}")
    with pytest.raises(CommandError, match="already exists"):
        remove("--study", "gender", "--item", "sdxl/0.png", "--with-labels", "--backup", str(backup))
    assert backup.read_text() == "{}"


def test_a_backup_of_another_study_is_refused(labelled, tmp_path, django_capture_on_commit_callbacks):
    backup = tmp_path / "b.json"
    remove("--study", "gender", "--item", "sdxl/3.png", "--backup", str(backup))
    StudyFactory(slug="other", name="Other")
    with pytest.raises(CommandError, match="holds items of the study 'gender', not 'other'"):
        call_command("import_images", study="other", restore=str(backup), stdout=io.StringIO())


def test_a_changed_file_is_imported_after_removing_its_item(
    imported, study, root, tmp_path, django_capture_on_commit_callbacks
):
    # The fix the import's refusal names: remove the item, then import the new file.
    (root / "sdxl" / "0.png").write_bytes(png_bytes(77))
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    assert "remove_items" in images_import(study=study, manifest_path=manifest, root=root).rejected[0].reason
    with django_capture_on_commit_callbacks(execute=True):
        remove("--study", "gender", "--item", "sdxl/0.png")
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert (summary.accepted, summary.rejected) == (1, [])


# --- what a restore accepts ----------------------------------------------------------------------


@pytest.fixture
def backup(labelled, tmp_path, django_capture_on_commit_callbacks) -> Path:
    """A backup of sdxl/0.png (agreed), sdxl/1.png (resolved) and sdxl/2.png (a prediction and a
    round entry), removed with their labels."""
    path = tmp_path / "removed.json"
    with django_capture_on_commit_callbacks(execute=True):
        remove(
            "--study", "gender", "--item", "sdxl/0.png", "sdxl/1.png", "sdxl/2.png",
            "--with-labels", "--backup", str(path),
        )  # fmt: skip
    return path


def restore(path: Path, *args: str, study: str = "gender") -> str:
    out = io.StringIO()
    call_command("import_images", "--study", study, "--restore", str(path), *args, stdout=out)
    return out.getvalue()


def tampered(path: Path, change) -> Path:
    """A copy of the backup at ``path`` after ``change(document)``."""
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    copy = path.with_name("tampered.json")
    copy.write_text(json.dumps(document), encoding="utf-8")
    return copy


def first(document, model: str) -> dict:
    return next(row for row in document["rows"] if row["model"] == model)


def state(settings) -> tuple:
    """Everything a refused restore must leave as it was."""
    from django.contrib.auth import get_user_model

    return (
        sorted(Item.objects.values_list("pk", "key")),
        sorted(Label.objects.values_list("pk", "value", "item_id")),
        get_user_model().objects.count(),
        get_user_model().objects.filter(is_superuser=True).count(),
        ItemChange.objects.count(),
        Prediction.objects.count(),
        media(settings),
    )


def refused(path: Path, match: str, settings) -> None:
    before = state(settings)
    with pytest.raises(CommandError, match=match):
        restore(path)
    assert state(settings) == before


def fields(model: str, **values):
    """A change to a backup: set ``values`` in the fields of its first ``model`` row."""
    return lambda document: first(document, model)["fields"].update(values)


def add_row(row: dict):
    return lambda document: document["rows"].append(row)


SUPERUSER = {
    "model": "auth.user",
    "pk": 999,
    "fields": {"username": "mallory", "password": "!", "is_superuser": True, "is_staff": True},
}
KEPT_ESTIMATE = {
    "model": "estimates.keptestimate",
    "pk": 1,
    "fields": {"study": 1, "detector": "x", "state": "", "history": False,
               "computed_at": "2026-01-01T00:00:00Z", "report": "gASVAAAAAAAAAAB9lC4="},
}  # fmt: skip


def test_a_restore_refuses_every_row_a_removal_would_not_have_written(backup, study, settings):
    """Each change below, made to a real backup, refuses the whole file naming the row; none
    writes anything (one backup for all: a refused restore leaves it usable)."""
    from estimates.models import KeptEstimate

    n = len(json.loads(backup.read_text())["rows"])
    other = StudyFactory(slug="other", name="Other")
    kept = image_of(Item.objects.get(key="sdxl/3.png"))

    def invent(document):
        first(document, "studies.item")["fields"]["key"] = "new.png"
        document["items"] = ["new.png", *document["items"][1:]]

    def only_an_estimate(document):
        document["rows"] = [KEPT_ESTIMATE]

    cases = [
        (add_row(SUPERUSER), rf"row {n + 1} is a 'auth\.user' row: a restore takes only the rows remove_items writes"),
        (only_an_estimate, r"row 1 is a 'estimates\.keptestimate' row"),
        (fields("annotate.finallabel", value="robot"), r"\(annotate\.finallabel \d+\) 'robot' is not an answer to the question 'gender'"),
        (fields("annotate.labelrevision", value="robot"), r"\(annotate\.labelrevision \d+\) 'robot' is not an answer"),
        (fields("annotate.label", is_superuser=True), r"\(annotate\.label \d+\) cannot be read \(Label has no field named 'is_superuser'\)"),
        (fields("annotate.label", annotator=4242), r"names the account id 4242 \(annotator\), which does not exist"),
        (fields("studies.item", study=other.pk), r"\(studies\.item \d+\) belongs to another study, not 'gender'"),
        (invent, r"names the item new\.png, which was never removed from the study"),
        (fields("detectors.prediction", image=kept.pk), rf"\(detectors\.prediction \d+\) points to studies\.image {kept.pk} \(image\), which is not the study's"),
        (fields("studies.image", file="../../etc/passwd"), r"names the file '\.\./\.\./etc/passwd', which is not the file of its hash"),
    ]  # fmt: skip
    for change, message in cases:
        refused(tampered(backup, change), message + r".*nothing was written", settings)
    assert not KeptEstimate.objects.exists()
    assert "Restored 3 item(s)" in restore(backup)


def test_a_restore_never_overwrites_another_studys_label(backup, settings, annotator_a, tmp_path, root):
    other = StudyFactory(slug="other", name="Other")
    images_import(
        study=other, manifest_path=write_manifest(tmp_path / "o.csv", [row("sdxl/3.png")]), root=root
    )
    theirs = Label.objects.create(
        item=Item.objects.get(study=other),
        question=other.questions.get(),
        annotator=annotator_a,
        value="male",
    )

    def take_their_id(document):
        first(document, "annotate.label")["pk"] = theirs.pk
        first(document, "annotate.label")["fields"]["value"] = "not-a-choice"

    def point_at_their_item(document):
        first(document, "annotate.label")["fields"]["item"] = theirs.item_id

    refused(
        tampered(backup, take_their_id),
        r"\(annotate\.label \d+\) would overwrite a row that exists",
        settings,
    )
    refused(
        tampered(backup, point_at_their_item),
        rf"\(annotate\.label \d+\) points to studies\.item {theirs.item_id} \(item\), which is not the study's",
        settings,
    )
    theirs.refresh_from_db()
    assert (theirs.value, theirs.item.study) == ("male", other)


def test_a_restore_names_a_question_gone_since_the_removal(backup, study, settings):
    study.questions.get(key="gender").delete()
    refused(
        backup,
        r"answers the question 'gender' \(id \d+\), which the study 'gender' no longer has",
        settings,
    )


def test_a_deeply_nested_backup_is_refused_with_a_message(tmp_path, study, settings):
    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "biaslab-removed-items", "rows": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused(deep, r"not a readable backup file \(the backup is nested deeper than \d+ levels\)", settings)


def test_a_dry_run_restore_checks_everything_and_writes_nothing(backup, settings):
    before = state(settings)
    out = restore(backup, "--dry-run")
    assert "Would restore 3 item(s) into study 'gender'" in out
    assert "3 items" in out
    assert "4 labels" in out
    assert "1 prediction" in out
    assert "files: 3" in out
    assert "dry run" in out
    assert "nothing was written" in out
    assert state(settings) == before
    # A backup a real restore refuses is refused by the dry run too.
    with pytest.raises(CommandError, match="would overwrite"):
        restore(
            tampered(backup, lambda d: first(d, "studies.item").update(pk=Item.objects.first().pk)),
            "--dry-run",
        )


def test_a_restore_is_recorded_in_the_items_history(backup, settings):
    restore(backup)
    restored = ItemChange.objects.filter(action="restored").order_by("item_key")
    assert [(c.item_key, c.item.key) for c in restored] == [
        (k, k) for k in ("sdxl/0.png", "sdxl/1.png", "sdxl/2.png")
    ]
    change = restored[0]
    assert change.actor.startswith("shell user")
    assert change.changes == {"backup": str(backup.resolve())}
    assert f"import_images --restore {backup}" in change.source
    # The newest record of the item says it is back.
    assert ItemChange.objects.filter(item_key="sdxl/0.png").first().action == "restored"


# --- naming the items to remove -------------------------------------------------------------------


def test_a_key_that_names_no_item_is_refused_never_read_as_an_id(imported, tmp_path):
    victim = imported["sdxl/0.png"]
    manifest = tmp_path / "rm.csv"
    manifest.write_text(f"item\nsdxl/3.png\n{victim.pk}\n", encoding="utf-8")
    with pytest.raises(
        CommandError, match=rf"not items of the study 'gender': {victim.pk}; nothing was removed"
    ):
        remove("--study", "gender", str(manifest))
    with pytest.raises(CommandError, match=rf"not items of the study 'gender': {victim.pk};"):
        remove("--study", "gender", "--item", str(victim.pk))
    assert Item.objects.count() == 4


def test_an_item_is_named_by_id_only_as_id_n(imported, django_capture_on_commit_callbacks):
    victim = imported["sdxl/0.png"]
    with django_capture_on_commit_callbacks(execute=True):
        out = remove("--study", "gender", "--item", f"id:{victim.pk}", "sdxl/1.png")
    assert "Removed 2 item(s) from study 'gender': sdxl/0.png, sdxl/1.png" in out
    with pytest.raises(CommandError, match=rf"not items of the study 'gender': id:{victim.pk};"):
        remove("--study", "gender", "--item", f"id:{victim.pk}")
    with pytest.raises(CommandError, match="an id is written id:N"):
        remove("--study", "gender", "--item", "id:x")


def test_a_manifest_with_only_an_item_column_is_read(imported, tmp_path, django_capture_on_commit_callbacks):
    manifest = tmp_path / "rm.csv"
    manifest.write_text("item\nsdxl/3.png\n", encoding="utf-8")
    with django_capture_on_commit_callbacks(execute=True):
        assert "Removed 1 item(s)" in remove("--study", "gender", str(manifest))
    manifest.write_text("path\nsdxl/2.png\n", encoding="utf-8")
    with pytest.raises(CommandError, match="no 'item' or 'image' column"):
        remove("--study", "gender", str(manifest))


def test_a_nul_byte_in_a_manifest_is_refused_naming_the_row(imported, tmp_path):
    manifest = tmp_path / "rm.csv"
    manifest.write_text("image\nsdxl/3.png\nsdxl/2\x00.png\n", encoding="utf-8")
    with pytest.raises(CommandError, match=r"rm\.csv: row 3: the 'image' value contains a NUL character"):
        remove("--study", "gender", str(manifest))
    assert Item.objects.count() == 4


def test_the_default_backup_goes_to_the_data_folder_and_says_where(
    labelled, tmp_path, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.VAR_DIR = tmp_path / "var"
    here = tmp_path / "repository"
    here.mkdir()
    monkeypatch.chdir(here)
    with django_capture_on_commit_callbacks(execute=True):
        out = remove("--study", "gender", "--item", "sdxl/0.png", "--with-labels")
    (written,) = (tmp_path / "var" / "backups").glob("removed-gender-*.json")
    assert f"Backup written to {written}" in out
    assert list(here.iterdir()) == []


def test_an_item_whose_file_another_study_kept_is_restored_onto_that_image(
    labelled, root, tmp_path, django_capture_on_commit_callbacks
):
    other = StudyFactory(slug="other", name="Other")
    images_import(
        study=other, manifest_path=write_manifest(tmp_path / "o.csv", [row("sdxl/0.png")]), root=root
    )
    shared = image_of(labelled["sdxl/0.png"])
    path = tmp_path / "b.json"
    with django_capture_on_commit_callbacks(execute=True):
        remove("--study", "gender", "--item", "sdxl/0.png", "--with-labels", "--backup", str(path))
    assert "Restored 1 item(s)" in restore(path)
    assert image_of(Item.objects.get(study__slug="gender", key="sdxl/0.png")) == shared
    assert Label.objects.filter(item__key="sdxl/0.png", item__study__slug="gender").count() == 2
