"""A database filled by the one-question schema is carried forward with nothing lost.

``recipe.build`` writes a small gender study with the previous schema's models (historical
models of annotate 0004 / detectors 0002); the golden files beside this test are what the
previous code exported from exactly that data. After migrating to the current schema the
exports must say the same (the new exports add columns; the old ones keep their values).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migrations.recipe import build

pytestmark = pytest.mark.migrations

HERE = Path(__file__).parent
OLD = [
    ("annotate", "0004_label_revision_request_id"),
    ("detectors", "0002_detector_run_study_optional"),
    ("studies", None),
]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.fixture
def migrated(transactional_db, django_db_blocker) -> None:
    """The recipe written with the old schema, then every migration applied."""
    executor = _migrate(OLD)
    try:
        apps = executor.loader.project_state([t for t in OLD if t[1] is not None]).apps
        build(apps, apps.get_model("auth", "User"))
    finally:
        # Whatever happened, leave the schema current: the next tests (and the flush) need it.
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _ground_truth_export_says_the_same(slug):
    from annotate.exports import ground_truth_export
    from studies.models import Study

    study = Study.objects.get(slug=slug)
    before = _rows((HERE / f"golden_ground_truth_{slug}.csv").read_text())
    after = _rows(ground_truth_export(study=study, fmt="csv"))
    assert [{key: row[key] for key in before[0]} for row in after] == before
    assert {row["question"] for row in after} == {"gender"}
    assert [row["item"] for row in after] == [row["image"] for row in before]


def _ground_truth_json_keeps_every_old_key_and_value():
    from annotate.exports import ground_truth_export
    from studies.models import Study

    before = json.loads((HERE / "golden_ground_truth_gender.json").read_text())
    after = json.loads(ground_truth_export(study=Study.objects.get(slug="gender"), fmt="json"))
    assert after["study"] == before["study"]
    assert after["labels"] == before["labels"]
    assert [c for c in after["columns"] if c in before["columns"]] == before["columns"]
    rows = zip(after["rows"], before["rows"], strict=True)
    assert [{key: row[key] for key in old} for row, old in rows] == before["rows"]


def _questions_ids_history_and_reasons_survive():
    from annotate.models import FinalLabelRevision, Label, LabelRevision
    from studies.models import Item, Question, Study

    gender = Study.objects.get(slug="gender")
    question = Question.objects.get(study=gender, key="gender")
    assert question.values == ["male", "female", "low_quality", "other"]
    assert question.unresolvable_value == "low_quality"
    assert gender.description == "Label the gender."
    assert sorted(gender.annotators.values_list("username", flat=True)) == ["anna", "ben"]
    assert Item.objects.filter(study=gender).count() == 7
    changed = Label.objects.get(item__key="sdxl/lawyer_1.png", annotator__username="ben")
    assert list(LabelRevision.objects.filter(label=changed).values_list("value", flat=True)) == [
        "male",
        "female",
    ]
    other = Label.objects.get(item__key="sd3/nurse_4.png", annotator__username="anna")
    assert (other.value, other.reason, other.question_id) == ("other", "a robot, not a person", question.pk)
    assert FinalLabelRevision.objects.filter(item__study=gender, question=question).count() == 5
    assert Item.objects.get(key="sdxl/lawyer_3.png").completed_seats == 2


def _a_shared_file_becomes_one_image_with_one_prediction():
    from detectors.models import Prediction
    from studies.models import Image, Item

    first = Item.objects.get(key="sd3/lawyer_0.png").item_images.get().image
    shared = Item.objects.get(key="sdxl/kind_99.png").item_images.get().image
    assert first == shared
    assert Image.objects.count() == 7
    prediction = Prediction.objects.get(image=first, detector="clip")
    assert prediction.kind == "gender"
    assert prediction.output == {"label": "male", "reason": "", "scores": {"male": 0.0}}


def _predictions_keep_verdict_reason_scores_detail_and_failures():
    from detectors.models import Prediction

    golden = _rows((HERE / "golden_predictions.csv").read_text())
    by_path = {
        p.image.item_images.get(item__study__slug="gender").source_path: p
        for p in Prediction.objects.select_related("image")
    }
    for row in golden:
        if row["study"] != "gender":
            continue
        prediction = by_path[row["image"]]
        assert prediction.status == row["status"]
        assert prediction.verdict == row["prediction"]
        assert prediction.filter_reason == row["reason"]
        assert prediction.error == row["error"]
        if row["status"] == "ok":
            assert prediction.scores == json.loads(row["scores"])
            assert prediction.output.get("detail", "") == row["detail"]


def test_a_database_of_the_previous_schema_is_carried_forward_with_nothing_lost(migrated):
    """One migration round trip (about 15 s on SQLite), every check on its result."""
    _ground_truth_export_says_the_same("gender")
    _ground_truth_export_says_the_same("second")
    _ground_truth_json_keeps_every_old_key_and_value()
    _questions_ids_history_and_reasons_survive()
    _a_shared_file_becomes_one_image_with_one_prediction()
    _predictions_keep_verdict_reason_scores_detail_and_failures()
