from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from detectors.models import Prediction, PredictionStatus
from tests.factories import (
    ImageFactory,
    ItemFactory,
    PairItemFactory,
    PredictionFactory,
    PromptFactory,
    StudyFactory,
    image_of,
)
from tests.fakes import FakeMeasurer, registered_fake

pytestmark = pytest.mark.django_db

FIELDS = ("image_id", "detector", "version", "kind", "status", "output", "error")


def gender(label: str, reason: str = "", scores: dict | None = None, detail: str = "") -> dict:
    """A gender output as stored."""
    output = {"label": label, "reason": reason, "scores": scores or {}}
    return output | ({"detail": detail} if detail else {})


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
    """The files of four one-image items keyed (and imported as) sdxl/p/<n>.png."""
    prompt = PromptFactory(study=study)
    return [image_of(ItemFactory(prompt=prompt, key=f"sdxl/p/{n}.png")) for n in range(4)]


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
        output=gender("filtered", "other", {"p": 0.5}, "a dog"),
    )
    with registered_fake(FakeMeasurer):
        call_command(
            "run_detectors", "--detector", "fake_measure", stdout=io.StringIO(), stderr=io.StringIO()
        )
    PredictionFactory(
        image=images[1],
        detector="yolo",
        kind="objects",
        output={"objects": [{"class": "tie", "confidence": 0.75, "box": [1.0, 2.0, 3.5, 4.0]}]},
    )
    PredictionFactory(
        image=images[2], detector="clip_attr", kind="attributes", output={"scores": {"hat": 0.25}}
    )
    before = _snapshot()
    assert Prediction.objects.filter(status=PredictionStatus.FAILED).count() == 2
    path = tmp_path / "out.csv"
    call_command("export_predictions", "--format", "csv", "--output", str(path), stderr=io.StringIO())
    Prediction.objects.all().delete()
    out = import_file(path)
    assert "Imported 11 predictions (blip2: 1, clip_attr: 1, fake: 4, fake_measure: 4, yolo: 1)" in out
    assert _snapshot() == before


def test_csv_export_columns_and_values(images):
    PredictionFactory(
        image=images[0], detector="clip", version="v1", output=gender("male", scores={"male": 0.9})
    )
    PredictionFactory(image=images[1], detector="clip", version="v1", output=gender("filtered", "no_face"))
    PredictionFactory(
        image=images[2], detector="clip", version="v1", status="failed", output={}, error="boom"
    )
    measured = {"face": True, "age": 31.0, "gender": None, "skin_gray": 120.0}
    PredictionFactory(image=images[3], detector="measure", version="v1", kind="measurements", output=measured)
    rows = list(csv.DictReader(io.StringIO(export("--format", "csv"))))
    # The export columns are a contract: pinned here as the header line, not read from EXPORT_COLUMNS.
    assert (
        ",".join(rows[0])
        == "study,image,detector,version,kind,prediction,reason,scores,detail,status,error,seconds,output"
    )
    assert [(r["image"], r["kind"], r["prediction"], r["reason"], r["status"], r["error"]) for r in rows] == [
        ("sdxl/p/0.png", "gender", "male", "", "ok", ""),
        ("sdxl/p/1.png", "gender", "filtered", "no_face", "ok", ""),
        ("sdxl/p/2.png", "gender", "", "", "failed", "boom"),
        ("sdxl/p/3.png", "measurements", "", "", "ok", ""),
    ]
    assert json.loads(rows[0]["scores"]) == {"male": 0.9}
    assert json.loads(rows[0]["output"]) == gender("male", scores={"male": 0.9})
    assert rows[2]["output"] == ""
    assert json.loads(rows[3]["output"]) == measured
    assert json.loads(rows[3]["scores"]) == {}


def test_json_export_and_filters_by_detector_and_study(images):
    other_item = ItemFactory(prompt=PromptFactory(study=StudyFactory(slug="other")))
    PredictionFactory(image=images[0], detector="clip")
    PredictionFactory(image=images[1], detector="blip2")
    PredictionFactory(image=image_of(other_item), detector="clip")
    data = json.loads(export("--format", "json", "--detector", "clip"))
    assert sorted(d["study"] for d in data) == ["gender", "other"]
    data = json.loads(export("--format", "json", "--study", "other"))
    assert [(d["detector"], d["image"]) for d in data] == [("clip", other_item.key)]
    assert data[0]["scores"] == {}
    assert data[0]["output"] == gender("male")


def test_export_to_a_missing_folder_or_unknown_study_is_an_error(images, tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        export("--output", str(tmp_path / "nope" / "x.csv"))
    with pytest.raises(CommandError, match="No study with slug 'nope'"):
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
    got = {p.image.item_images.get().source_path: p for p in Prediction.objects.select_related("image")}
    assert got["sdxl/p/0.png"].verdict == "male"
    assert got["sdxl/p/0.png"].scores == {"score": 0.93}
    assert got["sdxl/p/0.png"].version == "imported"
    assert got["sdxl/p/1.png"].filter_reason == "no_face"
    assert got["sdxl/p/2.png"].filter_reason == "several_people"
    assert got["sdxl/p/3.png"].output == gender("filtered", "other", detail="blurry face")
    assert {p.kind for p in got.values()} == {"gender"}


def test_rows_alike_but_for_one_result_column_keep_their_own_outputs(images, tmp_path):
    # The import parses each distinct verdict once a batch: two rows equal in every column but
    # one (scores, score, reason, detail, status) must still store what each says.
    rows = [
        {"image": "sdxl/p/0.png", "prediction": "male", "scores": '{"male": 0.9}'},
        {"image": "sdxl/p/1.png", "prediction": "male", "scores": '{"male": 0.6}'},
        {"image": "sdxl/p/2.png", "prediction": "male", "scores": ""},
        {"image": "sdxl/p/3.png", "prediction": "male", "scores": "", "score": "0.5"},
    ]
    path = write_csv(tmp_path, [{"detector": "clip", "score": "", **row} for row in rows])
    import_file(path, "--study", "gender")
    got = {
        p.image.item_images.get().source_path: p.output for p in Prediction.objects.select_related("image")
    }
    assert got == {
        "sdxl/p/0.png": gender("male", scores={"male": 0.9}),
        "sdxl/p/1.png": gender("male", scores={"male": 0.6}),
        "sdxl/p/2.png": gender("male"),
        "sdxl/p/3.png": gender("male", scores={"score": 0.5}),
    }


def test_version_option_allows_a_second_import_of_the_same_detector(images, tmp_path):
    path = write_csv(tmp_path, [{"image": "sdxl/p/0.png", "detector": "facepp", "prediction": "female"}])
    import_file(path)
    changed = write_csv(
        tmp_path, [{"image": "sdxl/p/0.png", "detector": "facepp", "prediction": "male"}], name="changed.csv"
    )
    with pytest.raises(
        CommandError, match="line 2: this image already has a facepp@imported prediction with another result"
    ):
        import_file(changed)
    import_file(path, "--version", "2025-run")
    assert sorted(Prediction.objects.values_list("version", flat=True)) == ["2025-run", "imported"]


def test_importing_the_same_file_twice_changes_nothing_and_says_unchanged(images, tmp_path):
    path = write_csv(
        tmp_path,
        [
            {"image": "sdxl/p/0.png", "detector": "facepp", "prediction": "female", "score": "0.25"},
            {
                "image": "sdxl/p/1.png",
                "detector": "facepp",
                "kind": "attributes",
                "output": '{"scores": {"hat": 0.5}}',
            },
            {
                "image": "sdxl/p/2.png",
                "detector": "facepp",
                "status": "failed",
                "error": "timeout",
                "seconds": "1.5",
            },
        ],
    )
    assert "Imported 3 predictions (facepp: 3)." in import_file(path)
    before = _snapshot()
    out = import_file(path)
    assert "Imported 0 predictions." in out
    assert "unchanged: 3" in out
    assert _snapshot() == before
    # One new row beside the stored ones: only it is written.
    more = write_csv(
        tmp_path,
        [
            {"image": "sdxl/p/0.png", "detector": "facepp", "prediction": "female", "score": "0.25"},
            {"image": "sdxl/p/3.png", "detector": "facepp", "prediction": "male"},
        ],
        name="more.csv",
    )
    out = import_file(more)
    assert "Imported 1 predictions (facepp: 1)." in out
    assert "unchanged: 1" in out
    assert Prediction.objects.count() == 4


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
    (
        {"image": "sdxl/p/0.png", "detector": "openai/clip", "prediction": "male"},
        "detector name 'openai/clip' contains '/', which would break report URLs",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "kind": "faces"},
        "kind must be one of gender, attributes, measurements, objects, answers, got 'faces'",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male", "kind": "measurements"},
        "output is empty: a measurements row needs its output as a JSON object",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "kind": "objects", "output": "{oops"},
        "output is not JSON",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "kind": "objects", "output": "[]"},
        "output: must be a JSON object, got a list (objects output)",
    ),
    (
        {
            "image": "sdxl/p/0.png",
            "detector": "d",
            "kind": "objects",
            "output": '{"objects": [{"class": "tie", "confidence": 0.5, "box": [0, 0, 1, 1]},'
            ' {"class": "hat", "confidence": 0.5, "box": [0, 0, 1, 1]},'
            ' {"class": "cup", "confidence": 0.5, "box": [9, 0, 1, 1]}]}',
        },
        "output.objects[2].box: x1 must be greater than x0 (objects output)",
    ),
    (
        {
            "image": "sdxl/p/0.png",
            "detector": "d",
            "kind": "measurements",
            "output": '{"face": true, "age": 130, "gender": null, "skin_gray": null}',
        },
        "output.age: must be between 0 and 120, got 130 (measurements output)",
    ),
    (
        {
            "image": "sdxl/p/0.png",
            "detector": "d",
            "kind": "attributes",
            "output": '{"scores": {"hat": "yes"}}',
        },
        "output.scores.hat: must be a number, got a string (attributes output)",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "output": '{"label": "filtered", "reason": "blurry"}'},
        "output.reason: must be one of no_face",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "prediction": "female", "output": '{"label": "male"}'},
        "prediction 'female' disagrees with output.label 'male'",
    ),
    (
        {
            "image": "sdxl/p/0.png",
            "detector": "d",
            "kind": "attributes",
            "prediction": "male",
            "output": '{"scores": {"hat": 1}}',
        },
        "prediction is for gender rows; a attributes row has only its output",
    ),
    (
        {"image": "sdxl/p/0.png", "detector": "d", "status": "failed", "output": '{"label": "male"}'},
        "a failed row has no output",
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
    other = ItemFactory(prompt=PromptFactory(study=StudyFactory(slug="other")), key="sdxl/p/0.png")
    path = write_csv(tmp_path, [{"image": "sdxl/p/0.png", "detector": "d", "prediction": "male"}])
    with pytest.raises(CommandError, match=r"several studies \(gender, other\); give --study"):
        import_file(path)
    import_file(path, "--study", "other")
    assert Prediction.objects.get().image == image_of(other)


def test_a_path_naming_the_same_file_in_several_studies_needs_no_study(images, tmp_path):
    ItemFactory(prompt=PromptFactory(study=StudyFactory(slug="other")), key="sdxl/p/0.png", image=images[0])
    path = write_csv(tmp_path, [{"image": "sdxl/p/0.png", "detector": "d", "prediction": "male"}])
    import_file(path)
    assert Prediction.objects.get().image == images[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("image,detector\nsdxl/p/0.png,d\n", "missing required column prediction \\(or output\\)"),
        ("", "missing required column\\(s\\): image, detector \\(found: no header"),
        ("image,detector,prediction\n", "no data rows"),
        (b"image,detector,prediction\n\xff,d,male\n", "not UTF-8"),
    ],
)
def test_unusable_files_are_rejected(images, tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(CommandError, match=message):
        import_file(path)


def test_a_row_with_more_cells_than_the_header_is_refused_by_its_line(images, tmp_path):
    """As for every import: blank lines are not counted, the header is line 1."""
    path = tmp_path / "extra.csv"
    path.write_text("image,detector,prediction\nsdxl/p/0.png,d,male\n\nsdxl/p/1.png,d,male,surplus\n")
    with pytest.raises(CommandError, match="line 3: more cells than header columns"):
        import_file(path)
    assert not Prediction.objects.exists()


def test_missing_file_and_unknown_study_are_errors(images, tmp_path):
    with pytest.raises(CommandError, match=r"nope\.csv: file not found"):
        import_file(tmp_path / "nope.csv")
    path = write_csv(tmp_path, [{"image": "sdxl/p/0.png", "detector": "d", "prediction": "male"}])
    with pytest.raises(CommandError, match="No study with slug 'nope'"):
        import_file(path, "--study", "nope")


def test_exporting_an_unknown_detector_is_an_error_naming_the_detectors(images):
    PredictionFactory(image=images[0], detector="clip")
    with pytest.raises(CommandError, match=r"No predictions of detector 'clipp'.*: clip\."):
        export("--detector", "clipp")


def test_import_rows_of_every_kind_from_their_output_column(images, tmp_path):
    measured = {"face": True, "age": 41.5, "gender": "female", "skin_gray": None}
    objects = {"objects": [{"class": "tie", "confidence": 0.5, "box": [0, 0, 10, 12]}]}
    path = write_csv(
        tmp_path,
        [
            {
                "image": "sdxl/p/0.png",
                "detector": "m",
                "kind": "measurements",
                "output": json.dumps(measured),
            },
            {"image": "sdxl/p/1.png", "detector": "o", "kind": "objects", "output": json.dumps(objects)},
            {
                "image": "sdxl/p/2.png",
                "detector": "a",
                "kind": "attributes",
                "output": '{"scores": {"hat": 1}}',
            },
            {"image": "sdxl/p/3.png", "detector": "g", "kind": "", "output": '{"label": "female"}'},
        ],
    )
    assert "Imported 4 predictions (a: 1, g: 1, m: 1, o: 1)" in import_file(path)
    stored = {p.detector: p for p in Prediction.objects.all()}
    assert (stored["m"].kind, stored["m"].output) == ("measurements", measured)
    assert stored["o"].output == {
        "objects": [{"class": "tie", "confidence": 0.5, "box": [0.0, 0.0, 10.0, 12.0]}]
    }
    assert (stored["a"].kind, stored["a"].output) == ("attributes", {"scores": {"hat": 1.0}})
    assert (stored["g"].kind, stored["g"].verdict, stored["g"].output) == (
        "gender",
        "female",
        gender("female"),
    )


def test_an_output_column_needs_no_prediction_column_and_agreeing_columns_are_accepted(images, tmp_path):
    path = write_csv(
        tmp_path,
        [
            {
                "image": "sdxl/p/0.png",
                "detector": "g",
                "output": '{"label": "filtered", "reason": "other", "detail": "blurry face"}',
                "reason": "blurry face",
                "scores": "{}",
            }
        ],
    )
    import_file(path)
    assert Prediction.objects.get().output == gender("filtered", "other", detail="blurry face")


def test_a_bad_output_is_reported_with_its_line_and_field_and_nothing_is_imported(images, tmp_path):
    path = write_csv(
        tmp_path,
        [
            {"image": "sdxl/p/0.png", "detector": "m", "kind": "measurements", "output": '{"face": true}'},
            {"image": "sdxl/p/1.png", "detector": "m", "kind": "measurements", "output": ""},
            {
                "image": "sdxl/p/2.png",
                "detector": "m",
                "kind": "measurements",
                "output": '{"face": 1, "age": null, "gender": null, "skin_gray": null}',
            },
        ],
    )
    with pytest.raises(CommandError) as info:
        import_file(path)
    message = str(info.value)
    assert "Nothing imported: 3 problem(s)" in message
    assert "line 2: output.age: missing (null when it cannot be measured) (measurements output)" in message
    assert "line 3: output is empty: a measurements row needs its output" in message
    assert "line 4: output.face: must be true, false or null, got int (measurements output)" in message
    assert Prediction.objects.count() == 0


def test_a_detector_name_with_a_slash_is_refused_at_import(images, tmp_path):
    path = write_csv(
        tmp_path,
        [
            {"image": "sdxl/p/0.png", "detector": "clip", "prediction": "male"},
            {"image": "sdxl/p/1.png", "detector": "openai/clip-vit", "prediction": "male"},
        ],
    )
    with pytest.raises(CommandError, match=r"line 3: detector name 'openai/clip-vit' contains '/'"):
        import_file(path)
    assert Prediction.objects.count() == 0


def test_a_seed_photo_is_found_by_its_path_and_predicted_once_whatever_the_pairs(tmp_path):
    pair_study = StudyFactory(slug="pairs", protocol="pair_change")
    seed = ImageFactory()
    prompt = PromptFactory(study=pair_study)
    first, _second = (PairItemFactory(prompt=prompt, image__input=seed) for _ in range(2))
    seed_path = first.item_images.get(role="input").source_path
    measured = {"face": True, "age": 30.0, "gender": "male", "skin_gray": 99.0}
    path = write_csv(
        tmp_path,
        [{"image": seed_path, "detector": "m", "kind": "measurements", "output": json.dumps(measured)}],
    )
    import_file(path)
    assert Prediction.objects.get().image == seed
    rows = list(csv.DictReader(io.StringIO(export("--format", "csv"))))
    assert [(r["image"], r["study"]) for r in rows] == [(seed_path, "pairs")]


def test_a_pair_items_key_names_two_files_so_its_image_path_is_needed(tmp_path):
    item = PairItemFactory(prompt=PromptFactory(study=StudyFactory(slug="pairs", protocol="pair_change")))
    path = write_csv(tmp_path, [{"image": item.key, "detector": "d", "prediction": "male"}])
    with pytest.raises(CommandError, match=rf"line 2: '{item.key}' names 2 image files in study pairs"):
        import_file(path)
    edit = item.item_images.get(role="output")
    import_file(write_csv(tmp_path, [{"image": edit.source_path, "detector": "d", "prediction": "male"}]))
    assert Prediction.objects.get().image_id == edit.image_id


def test_an_item_key_names_the_file_of_a_one_image_item(study, tmp_path):
    item = ItemFactory(prompt=PromptFactory(study=study), key="item-7")
    item.item_images.update(source_path="uploads/7.png")
    path = write_csv(tmp_path, [{"image": "item-7", "detector": "d", "prediction": "male"}])
    import_file(path)
    assert Prediction.objects.get().image == image_of(item)


def test_two_rows_naming_one_file_by_two_paths_are_duplicates(images, tmp_path):
    ItemFactory(
        prompt=PromptFactory(study=images[0].item_images.get().item.study), key="copy.png", image=images[0]
    )
    path = write_csv(
        tmp_path,
        [
            {"image": "sdxl/p/0.png", "detector": "d", "prediction": "male"},
            {"image": "copy.png", "detector": "d", "prediction": "male"},
        ],
    )
    with pytest.raises(CommandError, match=r"line 3: duplicate of line 2 \(same image, detector, version\)"):
        import_file(path)


def test_a_box_outside_its_image_is_a_row_error_naming_the_box_and_nothing_is_imported(images, tmp_path):
    # The factory's images are 32 x 32: a box may reach the edge (and a pixel past it, rounding),
    # not beyond.
    inside = {"objects": [{"class": "tie", "confidence": 0.5, "box": [0, 0, 32, 32.5]}]}
    outside = {
        "objects": [
            {"class": "tie", "confidence": 0.5, "box": [1, 1, 5, 5]},
            {"class": "cup", "confidence": 0.4, "box": [10, 10, 40, 20]},
        ]
    }
    negative = {"objects": [{"class": "cup", "confidence": 0.4, "box": [-3, 0, 5, 5]}]}
    rows = [
        {"image": "sdxl/p/0.png", "detector": "o", "kind": "objects", "output": json.dumps(inside)},
        {"image": "sdxl/p/1.png", "detector": "o", "kind": "objects", "output": json.dumps(outside)},
        {"image": "sdxl/p/2.png", "detector": "o", "kind": "objects", "output": json.dumps(negative)},
    ]
    with pytest.raises(CommandError) as info:
        import_file(write_csv(tmp_path, rows))
    message = str(info.value)
    assert "Nothing imported: 2 problem(s)" in message
    assert "line 3: output.objects[1].box: [10, 10, 40, 20] lies outside the 32x32 image" in message
    assert "line 4: output.objects[0].box: [-3, 0, 5, 5] lies outside the 32x32 image" in message
    assert Prediction.objects.count() == 0
    import_file(write_csv(tmp_path, rows[:1]))
    assert Prediction.objects.get().output["objects"][0]["box"] == [0, 0, 32, 32.5]


def test_a_dry_run_says_what_would_be_imported_and_writes_nothing(images, tmp_path):
    # Issue 19: every importer has --dry-run.
    path = write_csv(
        tmp_path,
        [{"image": f"sdxl/p/{n}.png", "detector": "elsewhere", "prediction": "male"} for n in range(3)],
    )
    out = import_file(path, "--dry-run")
    assert "would import 3 predictions (elsewhere: 3)" in out
    assert "nothing was written" in out
    assert not Prediction.objects.exists()
    assert "Imported 3 predictions" in import_file(path)
    assert Prediction.objects.count() == 3
