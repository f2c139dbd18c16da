"""Ground-truth export, label and ground-truth import, and the export → import round trip (issue 2, 7-8)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from sklearn.metrics import cohen_kappa_score

from annotate import roles, services
from annotate.errors import ImportRejected
from annotate.exchange import (
    REASON_NOT_EXPORTED,
    ground_truth_export,
    ground_truth_import,
    ground_truth_rows,
    labels_import,
)
from annotate.ingest import images_import
from annotate.models import FinalLabel, FinalLabelSource, Image, Label, LabelRevision, Study
from annotate.selectors import label_rows_for_agreement
from tests.factories import ImageFactory, PromptFactory, png_bytes

User = get_user_model()


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def images(study):
    prompt = PromptFactory(study=study, category="profession", word="nurse", text="a photo of a nurse")
    return [ImageFactory(prompt=prompt, source_path=f"sdxl/{n}.png", seed=n) for n in range(4)]


def read_export(study: Study) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(ground_truth_export(study=study, fmt="csv"))))


# --- export ---------------------------------------------------------------------------------------


def test_export_has_exactly_the_issue_columns_in_order(study, images):
    header = ground_truth_export(study=study, fmt="csv").splitlines()[0]
    assert header == (
        "image,t2i_model,category,word,prompt,seed,annotator_1,label_1,annotator_2,label_2,"
        "final_label,resolved_by,note"
    )


def test_export_lists_every_image_with_labels_final_label_and_who_resolved(
    study, images, annotator_a, annotator_b, researcher
):
    services.label_import(image=images[0], annotator=annotator_a, value="male")
    services.label_import(image=images[0], annotator=annotator_b, value="male")
    services.label_import(image=images[1], annotator=annotator_a, value="male")
    services.label_import(image=images[1], annotator=annotator_b, value="female")
    services.dispute_resolve(image=images[1], researcher=researcher, value="low_quality", note="blurry")
    services.label_import(image=images[2], annotator=annotator_b, value="other", reason="a cat")
    rows = read_export(study)
    assert [r["image"] for r in rows] == ["sdxl/0.png", "sdxl/1.png", "sdxl/2.png", "sdxl/3.png"]
    agreed, resolved, partial, unlabelled = rows
    assert (agreed["annotator_1"], agreed["label_1"], agreed["annotator_2"], agreed["label_2"]) == (
        "anna",
        "male",
        "ben",
        "male",
    )
    assert (agreed["final_label"], agreed["resolved_by"]) == ("male", "")
    assert (resolved["final_label"], resolved["resolved_by"], resolved["note"]) == (
        "low_quality",
        "rita",
        "blurry",
    )
    assert (partial["annotator_1"], partial["label_1"], partial["final_label"]) == ("ben", "other", "")
    assert (unlabelled["label_1"], unlabelled["final_label"], unlabelled["seed"]) == ("", "", "3")
    assert (unlabelled["t2i_model"], unlabelled["category"], unlabelled["word"], unlabelled["prompt"]) == (
        "sdxl",
        "profession",
        "nurse",
        "a photo of a nurse",
    )


def test_export_grows_columns_when_an_image_has_more_labels_than_n(study, images, annotator_a, annotator_b):
    study.labels_per_image = 3
    study.save()
    third = User.objects.create_user("cleo")
    for user in (annotator_a, annotator_b, third):
        services.label_import(image=images[0], annotator=user, value="female")
    header = ground_truth_export(study=study, fmt="csv").splitlines()[0].split(",")
    assert header[6:12] == ["annotator_1", "label_1", "annotator_2", "label_2", "annotator_3", "label_3"]


def test_json_export_holds_the_same_rows_with_typed_seed(study, images):
    document = json.loads(ground_truth_export(study=study, fmt="json"))
    assert document["study"] == "gender"
    assert document["columns"][-3:] == ["final_label", "resolved_by", "note"]
    assert document["rows"] == ground_truth_rows(study=study)
    assert document["rows"][2]["seed"] == 2


def test_export_of_an_unknown_format_is_refused(study):
    with pytest.raises(ValueError, match="unknown export format 'xml'"):
        ground_truth_export(study=study, fmt="xml")


def test_export_command_writes_the_file(study, images, tmp_path):
    target = tmp_path / "gt.json"
    call_command(
        "export_ground_truth", format="json", study="gender", output=str(target), stderr=io.StringIO()
    )
    assert len(json.loads(target.read_text())["rows"]) == 4


def test_export_command_names_existing_studies_for_an_unknown_slug(study):
    with pytest.raises(CommandError, match="no study with slug 'nope' \\(existing studies: gender\\)"):
        call_command("export_ground_truth", study="nope", stdout=io.StringIO())


# --- labels_import ----------------------------------------------------------------------------------


def test_labels_import_creates_missing_annotators_and_the_agreed_final_label(study, images, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label", "reason"],
        [["sdxl/0.png", "zoe", "female", ""], ["sdxl/0.png", "yann", "female", ""]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert (summary.accepted, summary.rejected) == (2, [])
    zoe = User.objects.get(username="zoe")
    assert roles.is_annotator(zoe)
    assert not zoe.has_usable_password()
    assert study.annotators.filter(username="zoe").exists()
    final = FinalLabel.objects.get(image=images[0])
    assert (final.value, final.source) == ("female", FinalLabelSource.AGREED)


def test_labels_import_reports_every_bad_row_and_writes_nothing(study, images, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label"],
        [
            ["sdxl/0.png", "zoe", "male"],
            ["sdxl/99.png", "zoe", "male"],
            ["sdxl/1.png", "zoe", "alien"],
            ["sdxl/0.png", "zoe", "female"],
            ["sdxl/2.png", "bad name!", "male"],
        ],
    )
    summary = labels_import(study=study, csv_path=path)
    assert [str(r) for r in summary.rejected] == [
        "row 3 (sdxl/99.png): unknown image: sdxl/99.png is not an image of the study 'gender'",
        "row 4 (sdxl/1.png): unknown label 'alien' (valid labels: male, female, low_quality, other)",
        "row 5 (sdxl/0.png): duplicate row: same image and annotator as row 2",
        "row 6 (sdxl/2.png): invalid annotator username 'bad name!'",
    ]
    assert summary.accepted == 0
    assert Label.objects.count() == 0
    assert not User.objects.filter(username="zoe").exists()


def test_labels_import_rolls_back_everything_when_the_service_refuses_a_row(study, images, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label", "reason"],
        [["sdxl/0.png", "zoe", "male", ""], ["sdxl/1.png", "zoe", "other", ""]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert len(summary.rejected) == 1
    assert summary.rejected[0].row == 3
    assert "zoe:" in summary.rejected[0].reason
    assert Label.objects.count() == 0
    assert not User.objects.filter(username="zoe").exists()


def test_labels_import_refuses_a_third_annotator_on_an_image_of_two(study, images, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label"],
        [["sdxl/0.png", "zoe", "male"], ["sdxl/0.png", "yann", "male"], ["sdxl/0.png", "xia", "male"]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert summary.rejected[0].row == 4
    assert "already has its 2 annotators (yann, zoe)" in summary.rejected[
        0
    ].reason or "already has its 2" in (summary.rejected[0].reason)
    assert Label.objects.count() == 0


def test_labels_import_refuses_labels_on_an_image_with_imported_ground_truth(study, images, tmp_path):
    services.final_label_set(image=images[0], value="male", decided_by=None)
    path = write_csv(tmp_path / "l.csv", ["image", "annotator", "label"], [["sdxl/0.png", "zoe", "female"]])
    summary = labels_import(study=study, csv_path=path)
    assert summary.rejected
    assert Label.objects.count() == 0


def test_importing_the_same_labels_twice_changes_nothing(study, images, tmp_path):
    path = write_csv(tmp_path / "l.csv", ["image", "annotator", "label"], [["sdxl/0.png", "zoe", "male"]])
    labels_import(study=study, csv_path=path)
    revisions = LabelRevision.objects.count()
    again = labels_import(study=study, csv_path=path)
    assert (again.accepted, again.duplicates, again.rejected) == (0, 1, [])
    assert LabelRevision.objects.count() == revisions


def test_a_labels_file_missing_a_column_is_refused_whole(study, images, tmp_path):
    path = write_csv(tmp_path / "l.csv", ["image", "annotator"], [["sdxl/0.png", "zoe"]])
    with pytest.raises(ImportRejected, match="missing required column\\(s\\): label"):
        labels_import(study=study, csv_path=path)


def test_the_import_labels_command_prints_rejected_rows_and_fails(study, images, tmp_path):
    path = write_csv(tmp_path / "l.csv", ["image", "annotator", "label"], [["nope.png", "zoe", "male"]])
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 row\\(s\\) rejected: nothing was imported"):
        call_command("import_labels", str(path), study="gender", stdout=out)
    assert "row 2 (nope.png): unknown image" in out.getvalue()


# --- ground_truth_import -----------------------------------------------------------------------------


def test_ground_truth_import_sets_imported_final_labels_with_note_and_who(
    study, images, researcher, tmp_path
):
    path = write_csv(
        tmp_path / "gt.csv",
        ["image", "label", "note"],
        [["sdxl/0.png", "female", "from the paper"], ["sdxl/1.png", "low_quality", ""]],
    )
    summary = ground_truth_import(study=study, csv_path=path, user=researcher)
    assert (summary.accepted, summary.rejected) == (2, [])
    final = FinalLabel.objects.get(image=images[0])
    assert (final.value, final.source, final.note, final.decided_by) == (
        "female",
        FinalLabelSource.IMPORTED,
        "from the paper",
        researcher,
    )


def test_ground_truth_import_reports_every_bad_row_and_writes_nothing(study, images, researcher, tmp_path):
    path = write_csv(
        tmp_path / "gt.csv",
        ["image", "label"],
        [
            ["sdxl/0.png", "male"],
            ["ghost.png", "male"],
            ["sdxl/1.png", ""],
            ["sdxl/2.png", "MALE"],
            ["sdxl/0.png", "male"],
        ],
    )
    summary = ground_truth_import(study=study, csv_path=path, user=researcher)
    assert [(r.row, r.reason.split(":")[0].split(" (")[0]) for r in summary.rejected] == [
        (3, "unknown image"),
        (4, "empty label"),
        (5, "unknown label 'MALE'"),
        (6, "duplicate row"),
    ]
    assert FinalLabel.objects.count() == 0


def test_importing_the_same_ground_truth_twice_changes_nothing(study, images, researcher, tmp_path):
    path = write_csv(tmp_path / "gt.csv", ["image", "label", "note"], [["sdxl/0.png", "male", "n"]])
    ground_truth_import(study=study, csv_path=path, user=researcher)
    again = ground_truth_import(study=study, csv_path=path, user=researcher)
    assert (again.accepted, again.duplicates) == (0, 1)
    assert images[0].final_label_revisions.count() == 1


def test_the_import_ground_truth_command_refuses_an_unknown_user(study, images, tmp_path):
    path = write_csv(tmp_path / "gt.csv", ["image", "label"], [["sdxl/0.png", "male"]])
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("import_ground_truth", str(path), study="gender", user="ghost")


# --- round trip ------------------------------------------------------------------------------------


def _manifest(tmp_path: Path, n: int) -> tuple[Path, Path]:
    root = tmp_path / "gen"
    root.mkdir()
    rows = []
    for i in range(n):
        (root / f"{i}.png").write_bytes(png_bytes(500 + i))
        category = "profession" if i % 2 else "trait"
        rows.append(
            [f"{i}.png", "sdxl" if i % 3 else "dalle", f"a photo of person {i % 4}", category, f"w{i % 4}", i]
        )
    return write_csv(
        tmp_path / "manifest.csv", ["image", "t2i_model", "prompt", "category", "word", "seed"], rows
    ), root


def _pairs(rows: list[dict[str, str]]) -> tuple[list[str], list[str]]:
    both = [r for r in rows if r["label_1"] and r["label_2"]]
    return [r["label_1"] for r in both], [r["label_2"] for r in both]


def _agreement_pairs(study: Study) -> tuple[list[str], list[str]]:
    by_image: dict[int, list[str]] = {}
    for image_id, _model, _cat, _user, value in label_rows_for_agreement(study=study):
        by_image.setdefault(image_id, []).append(value)
    pairs = [v for v in by_image.values() if len(v) == 2]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _report_kappa(study: Study) -> tuple[float, float, int]:
    """What the agreement page shows, so the round trip is checked where users read it."""
    from reports.report import agreement_report

    report = agreement_report(study=study)
    return report["cohen_kappa"], report["observed_agreement"], report["n_images"]


def test_export_then_import_into_an_empty_database_gives_the_same_final_labels_and_kappa(
    tmp_path, settings, django_user_model
):
    manifest, root = _manifest(tmp_path, 12)
    study = Study.objects.create(name="Round trip", slug="rt")
    images_import(study=study, manifest_path=manifest, root=root)
    # Created in an order unlike their label order, so pairing must not depend on it.
    zed, amy, bob = (django_user_model.objects.create_user(u) for u in ("zed", "amy", "bob"))
    boss = django_user_model.objects.create_user("boss")
    plan = ["male", "female", "male", "other", "low_quality", "female", "male", "male", "female", "other"]
    second = ["male", "male", "male", "other", "female", "female", "low_quality", "male", "female", "male"]
    imgs = list(Image.objects.filter(study=study).order_by("id"))
    for i, image in enumerate(imgs[:10]):
        first_user, second_user = (zed, amy) if i % 2 else (bob, zed)
        services.label_import(
            image=image, annotator=first_user, value=plan[i], reason="why" * (plan[i] == "other")
        )
        services.label_import(
            image=image, annotator=second_user, value=second[i], reason="why" * (second[i] == "other")
        )
    services.dispute_resolve(image=imgs[1], researcher=boss, value="female", note="looked again")
    services.label_import(image=imgs[10], annotator=amy, value="male")
    services.final_label_set(image=imgs[11], value="low_quality", decided_by=boss, note="released")

    exported = read_export(study)
    export_file = tmp_path / "export.csv"
    export_file.write_text(ground_truth_export(study=study, fmt="csv"), encoding="utf-8")
    kappa_before = cohen_kappa_score(*_pairs(exported))
    agreement_kappa_before = cohen_kappa_score(*_agreement_pairs(study))
    report_before = _report_kappa(study)

    # An empty database: nothing of the study, its people or its files is left.
    Image.objects.all().delete()
    Study.objects.all().delete()
    django_user_model.objects.all().delete()
    settings.MEDIA_ROOT = tmp_path / "fresh-media"
    settings.MEDIA_ROOT.mkdir()

    fresh = Study.objects.create(name="Round trip", slug="rt")
    assert images_import(study=fresh, manifest_path=manifest, root=root).accepted == 12
    labels = labels_import(study=fresh, csv_path=export_file)
    assert labels.rejected == []
    truth = ground_truth_import(study=fresh, csv_path=export_file, user=None)
    assert truth.rejected == []
    # No final label to import: three open disputes and the image with one label.
    assert truth.skipped == 4
    # Agreed images got their final label back from the labels; only decisions are imported.
    assert (truth.accepted, truth.duplicates) == (2, 6)

    again = read_export(fresh)
    assert [(r["image"], r["final_label"]) for r in again] == [
        (r["image"], r["final_label"]) for r in exported
    ]
    assert [(r["annotator_1"], r["label_1"], r["annotator_2"], r["label_2"]) for r in again] == [
        (r["annotator_1"], r["label_1"], r["annotator_2"], r["label_2"]) for r in exported
    ]
    assert cohen_kappa_score(*_pairs(again)) == pytest.approx(kappa_before)
    assert cohen_kappa_score(*_agreement_pairs(fresh)) == pytest.approx(agreement_kappa_before)
    assert _report_kappa(fresh) == pytest.approx(report_before)
    other = Label.objects.filter(value="other").first()
    assert other.reason == REASON_NOT_EXPORTED


def test_reimporting_an_export_into_the_same_study_changes_nothing(
    study, images, annotator_a, annotator_b, tmp_path
):
    services.label_import(image=images[0], annotator=annotator_a, value="other", reason="a painting")
    services.label_import(image=images[0], annotator=annotator_b, value="male")
    export_file = tmp_path / "export.csv"
    export_file.write_text(ground_truth_export(study=study, fmt="csv"), encoding="utf-8")
    revisions = LabelRevision.objects.count()
    summary = labels_import(study=study, csv_path=export_file)
    assert (summary.accepted, summary.duplicates, summary.rejected) == (0, 2, [])
    assert Label.objects.get(annotator=annotator_a).reason == "a painting"
    assert LabelRevision.objects.count() == revisions
