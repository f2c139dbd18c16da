from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from detectors.models import Prediction, PredictionStatus
from tests.factories import ImageFactory, PredictionFactory, PromptFactory, StudyFactory
from tests.fakes import registered_fake

pytestmark = pytest.mark.django_db

FIELDS = (
    "image_id",
    "detector",
    "version",
    "status",
    "verdict",
    "filter_reason",
    "detail",
    "scores",
    "error",
)


def export(*args: str) -> str:
    out = io.StringIO()
    call_command("export_predictions", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def import_file(path: Path, *args: str) -> str:
    out = io.StringIO()
    call_command("import_predictions", str(path), *args, stdout=out)
    return out.getvalue()


def write_csv(tmp_path: Path, rows: list[dict[str, str]], name: str = "in.csv") -> Path:
    path = tmp_path / name
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture
def images(study):
    prompt = PromptFactory(study=study)
    return [ImageFactory(prompt=prompt, source_path=f"sdxl/p/{n}.png") for n in range(4)]


def _snapshot() -> set[tuple]:
    return {
        tuple(json.dumps(v, sort_keys=True) if isinstance(v, dict) else v for v in row)
        for row in Prediction.objects.values_list(*FIELDS)
    }


def test_export_then_import_round_trips_every_prediction(images, tmp_path):
    (Path(settings.MEDIA_ROOT) / images[3].file).write_bytes(b"broken")  # → a failed prediction
    with registered_fake():
        call_command("run_detectors", "--detector", "fake", stdout=io.StringIO(), stderr=io.StringIO())
    PredictionFactory(
        image=images[0],
        detector="blip2",
        version="x",
        verdict="filtered",
        filter_reason="other",
        detail="a dog",
        scores={"p": 0.5},
    )
    before = _snapshot()
    assert Prediction.objects.filter(status=PredictionStatus.FAILED).count() == 1
    path = tmp_path / "out.csv"
    call_command("export_predictions", "--format", "csv", "--output", str(path), stderr=io.StringIO())
    Prediction.objects.all().delete()
    out = import_file(path)
    assert "Imported 5 predictions (blip2: 1, fake: 4)" in out
    assert _snapshot() == before


def test_csv_export_columns_and_values(images):
    PredictionFactory(image=images[0], detector="clip", version="v1", verdict="male", scores={"male": 0.9})
    PredictionFactory(
        image=images[1], detector="clip", version="v1", verdict="filtered", filter_reason="no_face"
    )
    PredictionFactory(
        image=images[2], detector="clip", version="v1", status="failed", verdict="", error="boom"
    )
    rows = list(csv.DictReader(io.StringIO(export("--format", "csv"))))
    assert list(rows[0]) == [
        "study",
        "image",
        "detector",
        "version",
        "prediction",
        "reason",
        "scores",
        "detail",
        "status",
        "error",
        "seconds",
    ]
    assert [(r["image"], r["prediction"], r["reason"], r["status"], r["error"]) for r in rows] == [
        ("sdxl/p/0.png", "male", "", "ok", ""),
        ("sdxl/p/1.png", "filtered", "no_face", "ok", ""),
        ("sdxl/p/2.png", "", "", "failed", "boom"),
    ]
    assert json.loads(rows[0]["scores"]) == {"male": 0.9}


def test_json_export_and_filters_by_detector_and_study(images):
    other = ImageFactory(prompt=PromptFactory(study=StudyFactory(slug="other")))
    PredictionFactory(image=images[0], detector="clip")
    PredictionFactory(image=images[1], detector="blip2")
    PredictionFactory(image=other, detector="clip")
    data = json.loads(export("--format", "json", "--detector", "clip"))
    assert sorted(d["study"] for d in data) == ["gender", "other"]
    data = json.loads(export("--format", "json", "--study", "other"))
    assert [(d["detector"], d["image"]) for d in data] == [("clip", other.source_path)]
    assert data[0]["scores"] == {}


def test_export_to_a_missing_folder_or_unknown_study_is_an_error(images, tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        export("--output", str(tmp_path / "nope" / "x.csv"))
    with pytest.raises(CommandError, match="No study 'nope'"):
        export("--study", "nope")


def test_import_minimal_columns_with_score_and_reasons(images, tmp_path):
    path = write_csv(
        tmp_path,
        [
            {
                "image": "sdxl/p/0.png",
                "detector": "facepp",
                "prediction": "Male",
                "score": "0.93",
                "reason": "",
            },
            {
                "image": "sdxl/p/1.png",
                "detector": "facepp",
                "prediction": "filtered",
                "score": "",
                "reason": "no_face",
            },
            {
                "image": "sdxl/p/2.png",
                "detector": "facepp",
                "prediction": "filtered",
                "score": "",
                "reason": "Several people",
            },
            {
                "image": "sdxl/p/3.png",
                "detector": "facepp",
                "prediction": "filtered",
                "score": "",
                "reason": "blurry face",
            },
        ],
    )
    assert "Imported 4 predictions (facepp: 4)" in import_file(path, "--study", "gender")
    got = {p.image.source_path: p for p in Prediction.objects.select_related("image")}
    assert got["sdxl/p/0.png"].verdict == "male"
    assert got["sdxl/p/0.png"].scores == {"score": 0.93}
    assert got["sdxl/p/0.png"].version == "imported"
    assert got["sdxl/p/1.png"].filter_reason == "no_face"
    assert got["sdxl/p/2.png"].filter_reason == "several_people"
    assert (got["sdxl/p/3.png"].filter_reason, got["sdxl/p/3.png"].detail) == ("other", "blurry face")


def test_version_option_allows_a_second_import_of_the_same_detector(images, tmp_path):
    path = write_csv(tmp_path, [{"image": "sdxl/p/0.png", "detector": "facepp", "prediction": "female"}])
    import_file(path)
    with pytest.raises(CommandError, match="already has a facepp@imported prediction"):
        import_file(path)
    import_file(path, "--version", "2025-run")
    assert sorted(Prediction.objects.values_list("version", flat=True)) == ["2025-run", "imported"]


BAD_ROWS = [
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "man"},
        "prediction must be male, female or filtered",
    ),
    ({"image": "nope.png", "detector": "d", "prediction": "male"}, "no image 'nope.png'"),
    ({"image": "", "detector": "d", "prediction": "male"}, "image is empty"),
    ({"image": "sdxl/p/0.png", "detector": "", "prediction": "male"}, "detector is empty"),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "reason": "no_face"},
        "a reason is only allowed with filtered",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "score": "high"},
        "score is not a number",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "score": "nan"},
        "score must be finite",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "scores": "{oops"},
        "scores is not JSON",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "scores": "[1]"},
        "scores must be a JSON object",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "status": "meh"},
        "status must be ok or failed",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "status": "failed"},
        "a failed row has no prediction",
    ),
    ({"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "seconds": "-1"}, "seconds must be"),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "study": "nope"},
        "no image 'sdxl/p/0.png' in study 'nope'",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d" * 101, "prediction": "male"},
        "detector name is longer than 100 characters",
    ),
]


@pytest.mark.parametrize(("row", "message"), BAD_ROWS)
def test_a_bad_row_rejects_the_whole_file_with_its_line(images, tmp_path, row, message):
    good = {"image": "sdxl/p/1.png", "detector": "d", "prediction": "female"}
    path = write_csv(tmp_path, [good, row])
    with pytest.raises(CommandError) as info:
        import_file(path)
    assert "Nothing imported: 1 problem(s)" in str(info.value)
    assert f"line 3: {message}" in str(info.value)
    assert Prediction.objects.count() == 0


def test_every_bad_row_is_reported_not_just_the_first(images, tmp_path):
    path = write_csv(
        tmp_path,
        [
            {"image": "sdxl/p/0.png", "detector": "d", "prediction": "x"},
            {"image": "sdxl/p/1.png", "detector": "d", "prediction": "male"},
            {"image": "sdxl/p/1.png", "detector": "d", "prediction": "female"},
        ],
    )
    with pytest.raises(CommandError) as info:
        import_file(path)
    assert "line 2: prediction must be" in str(info.value)
    assert "line 4: duplicate of line 3" in str(info.value)
    assert Prediction.objects.count() == 0


def test_an_image_path_in_several_studies_needs_the_study(images, tmp_path):
    ImageFactory(prompt=PromptFactory(study=StudyFactory(slug="other")), source_path="sdxl/p/0.png")
    path = write_csv(tmp_path, [{"image": "sdxl/p/0.png", "detector": "d", "prediction": "male"}])
    with pytest.raises(CommandError, match=r"several studies \(gender, other\); give --study"):
        import_file(path)
    import_file(path, "--study", "other")
    assert Prediction.objects.get().image.study.slug == "other"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("image,detector\nsdxl/p/0.png,d\n", "missing column\\(s\\) prediction"),
        ("", "empty file"),
        ("image,detector,prediction\n", "no data rows"),
        (b"image,detector,prediction\n\xff,d,male\n", "not UTF-8"),
    ],
)
def test_unusable_files_are_rejected(images, tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(CommandError, match=message):
        import_file(path)


def test_missing_file_and_unknown_study_are_errors(images, tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        import_file(tmp_path / "nope.csv")
    path = write_csv(tmp_path, [{"image": "sdxl/p/0.png", "detector": "d", "prediction": "male"}])
    with pytest.raises(CommandError, match="No study 'nope'"):
        import_file(path, "--study", "nope")


def test_exporting_an_unknown_detector_is_an_error_naming_the_detectors(images):
    PredictionFactory(image=images[0], detector="clip")
    with pytest.raises(CommandError, match=r"No predictions of detector 'clipp'.*: clip\."):
        export("--detector", "clipp")
