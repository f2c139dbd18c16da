"""The import pipeline's record of every run (``ImportRun``): written for a good file, a file
with bad rows, a dry run and a refused file alike, and listed in the admin."""

from __future__ import annotations

import csv

import pytest
from django.urls import reverse

from annotate.imports import ground_truth_import, labels_import
from annotate.models import Label
from detectors.imports import PredictionImportRejected, predictions_import
from studies.errors import ImportRejected
from studies.imports import Importer, ImportSummary, RejectedRow, import_run
from studies.ingest import images_import
from studies.models import ImportRun, ImportStatus
from tests.annotate.test_admin import good_zip, upload
from tests.factories import ItemFactory, PromptFactory, png_bytes


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study)
    return [ItemFactory(prompt=prompt, key=f"img/{n}.png") for n in range(3)]


def write(tmp_path, header, rows, name="labels.csv"):
    path = tmp_path / name
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_a_labels_import_records_who_ran_it_on_which_file_and_what_it_counted(
    study, items, tmp_path, researcher
):
    path = write(
        tmp_path,
        ["item", "annotator", "label"],
        [("img/0.png", "anna", "male"), ("img/1.png", "anna", "female")],
    )
    labels_import(study=study, csv_path=path, user=researcher)
    run = ImportRun.objects.get()
    assert (run.kind, run.study, run.user, run.actor, run.file) == (
        "labels",
        study,
        researcher,
        "rita",
        str(path),
    )
    assert (run.status, run.rows, run.rejected, run.rejected_rows) == (ImportStatus.DONE, 2, 0, [])
    assert run.counts["accepted"] == 2
    assert run.started_at <= run.finished_at


def test_a_file_with_a_bad_row_is_recorded_as_rejected_with_the_row_and_writes_no_label(
    study, items, tmp_path
):
    path = write(
        tmp_path, ["item", "annotator", "label"], [("img/0.png", "anna", "male"), ("nope", "anna", "male")]
    )
    summary = labels_import(study=study, csv_path=path)
    run = ImportRun.objects.get()
    assert run.status == ImportStatus.REJECTED
    assert run.rejected_rows == [[3, "nope", summary.rejected[0].reason]]
    assert run.actor.startswith("shell user")
    assert run.user is None
    assert not Label.objects.exists()


def test_a_dry_run_is_recorded_as_one(study, items, tmp_path, researcher):
    path = write(tmp_path, ["item", "label"], [("img/2.png", "male")], name="truth.csv")
    summary = ground_truth_import(study=study, csv_path=path, user=researcher, dry_run=True)
    run = ImportRun.objects.get()
    assert (summary.accepted, run.kind, run.status, run.counts["accepted"]) == (
        1,
        "ground truth",
        "dry_run",
        1,
    )


def test_a_refused_file_is_recorded_with_its_error_and_the_error_is_raised(study, tmp_path):
    path = write(tmp_path, ["item", "annotator"], [("img/0.png", "anna")])
    with pytest.raises(ImportRejected, match="missing required column"):
        labels_import(study=study, csv_path=path)
    run = ImportRun.objects.get()
    assert run.status == ImportStatus.REFUSED
    assert "missing required column(s): label" in run.error


class _Numbers(Importer[int, int]):
    """A toy importer: one number a row, refused when odd; written into ``written``."""

    kind = "numbers"

    def __init__(self, values):
        self.values, self.written = values, []

    def rows(self):
        return ((n + 2, {"n": str(v)}) for n, v in enumerate(self.values))

    def parse_row(self, number, row):
        value = int(row["n"])
        return RejectedRow(number, row["n"], "odd") if value % 2 else value

    def check_batch(self, parsed, summary):
        return parsed

    def write_batch(self, good, summary):
        self.written += good
        summary.accepted += len(good)


def test_the_pipeline_writes_every_good_row_in_batches_or_none_when_a_row_is_bad(db, settings, tmp_path):
    settings.BIASLAB_IMPORT_BATCH_ROWS = 3
    stages = []
    good = _Numbers([0, 2, 4, 6, 8])
    summary = import_run(
        good, summary=ImportSummary(), source="n.csv", progress=lambda s, n: stages.append((s, n))
    )
    assert (good.written, summary.accepted, summary.rows) == ([0, 2, 4, 6, 8], 5, 5)
    assert stages == [("checked", 3), ("checked", 2), ("written", 3), ("written", 2)]
    bad = _Numbers([0, 2, 3, 4])
    summary = import_run(bad, summary=ImportSummary(), source="n.csv")
    assert (bad.written, [str(r) for r in summary.rejected]) == ([], ["row 4 (3): odd"])
    assert list(ImportRun.objects.order_by("id").values_list("status", flat=True)) == ["done", "rejected"]


def test_the_admin_lists_import_runs_and_shows_one(client_for, admin_user, study, items, tmp_path):
    path = write(tmp_path, ["item", "annotator", "label"], [("img/0.png", "anna", "male")])
    labels_import(study=study, csv_path=path)
    client = client_for(admin_user)
    page = client.get(reverse("admin:studies_importrun_changelist"))
    assert page.status_code == 200
    assert "labels.csv" in page.content.decode()
    run = ImportRun.objects.get()
    assert client.get(reverse("admin:studies_importrun_change", args=[run.pk])).status_code == 200
    assert client.get(reverse("admin:studies_importrun_add")).status_code == 403


def test_a_predictions_import_with_a_bad_row_is_recorded_and_still_raises_every_line(db, tmp_path):
    path = write(
        tmp_path, ["image", "detector", "prediction"], [("nowhere.png", "clip", "male")], name="p.csv"
    )
    with pytest.raises(PredictionImportRejected) as refused:
        predictions_import(csv_path=path)
    assert refused.value.errors == ["line 2: no image 'nowhere.png' has been imported"]
    run = ImportRun.objects.get()
    assert (run.kind, run.status, run.rejected_rows) == (
        "predictions",
        "rejected",
        [[2, "nowhere.png", "no image 'nowhere.png' has been imported"]],
    )


def test_an_images_import_is_recorded_with_its_counts_and_refused_rows(study, tmp_path, admin_user):
    (tmp_path / "a.png").write_bytes(png_bytes(1))
    rows = [
        ("a.png", "sdxl", "a photo", "profession", "nurse"),
        ("gone.png", "sdxl", "a photo", "profession", "nurse"),
    ]
    path = write(tmp_path, ["image", "t2i_model", "prompt", "category", "word"], rows, name="manifest.csv")
    summary = images_import(study=study, manifest_path=path, root=tmp_path, user=admin_user)
    run = ImportRun.objects.get()
    assert (run.kind, run.user, run.status, run.rows, run.counts["accepted"]) == (
        "images",
        admin_user,
        "rejected",
        2,
        1,
    )
    assert run.rejected_rows == [[3, "gone.png", summary.rejected[0].reason]]


def test_a_zip_upload_in_the_admin_is_recorded_under_the_zip_name_and_the_admin(
    client_for, admin_user, study
):
    response = upload(client_for(admin_user), study, good_zip(2), name="batch.zip")
    assert response.status_code in (200, 302)
    run = ImportRun.objects.get()
    assert (run.kind, run.file, run.user, run.status, run.counts["accepted"]) == (
        "images",
        "batch.zip",
        admin_user,
        "done",
        2,
    )
