"""Bad input to the manifest importer (issue 19 section 3, "Bad input"): JSON too deep, too large
or holding what PostgreSQL refuses is a row error naming the row and field; every problem of a
file comes in one run, and a reason shared by many rows is said once with the count."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from studies.ingest import images_import
from studies.jsonbounds import (
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    JSONOutOfBounds,
    json_bounds_check,
    json_loads_bounded,
)
from studies.models import Image, Item, Prompt
from tests.factories import StudyFactory, png_bytes
from tests.studies.test_ingest import HEADER, row, write_manifest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    (folder / "sdxl").mkdir(parents=True)
    for n in range(3):
        (folder / "sdxl" / f"{n}.png").write_bytes(png_bytes(n))
    return folder


def nested(depth: int) -> str:
    """A params object nested ``depth`` levels deep: {"a": {"a": … {} …}}."""
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


# --- the shared validator -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (nested(900), f"params is nested deeper than {MAX_JSON_DEPTH} levels"),
        (nested(5000), f"params is nested deeper than {MAX_JSON_DEPTH} levels"),
        ("[" * 100_000, f"params is nested deeper than {MAX_JSON_DEPTH} levels"),
        ('{"a": {"b": ["x", "y\\u0000"]}}', "params.a.b[1] holds a NUL character"),
        ('{"a\\u0000": 1}', "params has a key with a NUL character"),
        ('{"cfg": 1e400}', "params.cfg holds a number too large to store"),
        ('{"cfg": -1e400}', "params.cfg holds a number too large to store"),
        ('{"cfg": NaN}', "params holds NaN is not a number JSON allows"),
        ('{"big": ' + "9" * 5000 + "}", "params is not valid JSON"),
        ('{"s": "' + "x" * MAX_JSON_BYTES + '"}', f"params is larger than {MAX_JSON_BYTES} bytes"),
    ],
    ids=[
        "depth-900",
        "depth-5000",
        "open-brackets",
        "nul",
        "nul-key",
        "1e400",
        "-1e400",
        "nan",
        "huge-int",
        "size",
    ],
)
def test_json_out_of_bounds_is_refused_naming_the_field_and_place(text, message):
    with pytest.raises(JSONOutOfBounds) as info:
        json_loads_bounded(text, field="params")
    assert str(info.value).startswith(message)


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = json.dumps({"prompt": "[[[[" * 50 + "{{{{" * 50, "steps": [1, [2, [3]]]})
    assert json_loads_bounded(text, field="params")["steps"] == [1, [2, [3]]]


def test_a_value_already_in_memory_is_checked_the_same_way():
    deep: dict = {}
    node = deep
    for _ in range(MAX_JSON_DEPTH + 5):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(JSONOutOfBounds, match="output is nested deeper than"):
        json_bounds_check(deep, field="output")
    with pytest.raises(JSONOutOfBounds, match=r"output\.x holds a number too large"):
        json_bounds_check({"x": float("inf")}, field="output")
    json_bounds_check({"x": [1, 2.5, "ok"]}, field="output")


# --- at import: a row error, nothing of the row written -----------------------------------------


BAD_PARAMS = [
    (nested(900), f"params is nested deeper than {MAX_JSON_DEPTH} levels"),
    (nested(5000), f"params is nested deeper than {MAX_JSON_DEPTH} levels"),
    ('{"negative": "blurry\\u0000"}', "params.negative holds a NUL character (\\u0000)"),
    ('{"guidance": 1e400}', "params.guidance holds a number too large to store"),
]
BAD_IDS = ["depth-900", "depth-5000", "nul-escape", "1e400"]


def _import_with_bad_params(study, root: Path, tmp_path: Path, params: str):
    rows = [row("sdxl/0.png"), row("sdxl/1.png", 1, params=params), row("sdxl/2.png", 2)]
    manifest = write_manifest(tmp_path / "m.csv", rows)
    return images_import(study=study, manifest_path=manifest, root=root)


@pytest.mark.parametrize(("params", "reason"), BAD_PARAMS, ids=BAD_IDS)
def test_params_out_of_bounds_is_a_row_error_and_the_good_rows_are_imported(
    study, root, tmp_path, params, reason
):
    summary = _import_with_bad_params(study, root, tmp_path, params)
    assert [r.row for r in summary.rejected] == [3]
    assert summary.rejected[0].reason.startswith(reason)
    assert sorted(Item.objects.values_list("key", flat=True)) == ["sdxl/0.png", "sdxl/2.png"]
    assert all(params == {"steps": 30} for params in Item.objects.values_list("params", flat=True))


@pytest.mark.postgres
@pytest.mark.parametrize(("params", "reason"), BAD_PARAMS[2:], ids=BAD_IDS[2:])
def test_on_postgresql_params_it_refuses_are_a_row_error_not_a_failed_import(
    study, root, tmp_path, params, reason
):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...)")
    summary = _import_with_bad_params(study, root, tmp_path, params)
    assert [(r.row, r.reason.split(" (")[0]) for r in summary.rejected] == [(3, reason.split(" (")[0])]
    assert summary.accepted == 2
    assert Item.objects.count() == 2


def test_the_admin_item_page_of_an_imported_item_renders(study, root, tmp_path, admin_client):
    """The import refused the deep params; what it kept renders in the admin."""
    _import_with_bad_params(study, root, tmp_path, nested(900))
    for item in Item.objects.all():
        assert admin_client.get(f"/admin/studies/item/{item.pk}/change/").status_code == 200


# --- every problem of the file in one run, grouped ----------------------------------------------


def test_every_problem_of_a_row_is_named_in_one_run(study, root, tmp_path):
    rows = [row("sdxl/0.png", category="", word="", seed="x", params="[1]")]
    summary = images_import(study=study, manifest_path=write_manifest(tmp_path / "m.csv", rows), root=root)
    reason = summary.rejected[0].reason
    assert "empty required values in columns 'category', 'word'" in reason
    assert "seed must be an integer, got 'x'" in reason
    assert "params must be a JSON object" in reason
    assert (Image.objects.count(), Item.objects.count(), Prompt.objects.count()) == (0, 0, 0)


def test_a_missing_file_and_a_bad_value_of_one_row_are_both_named(study, root, tmp_path):
    rows = [row("sdxl/missing.png", word="")]
    summary = images_import(study=study, manifest_path=write_manifest(tmp_path / "m.csv", rows), root=root)
    assert summary.rejected[0].reason == (
        "empty required value in column 'word'; file not found under the import root"
    )


def test_a_reason_shared_by_many_rows_is_said_once_with_the_count_and_the_first_rows(study, root, tmp_path):
    rows = [row(f"gone/{n}.png", n) for n in range(276)] + [row("sdxl/0.png", 300, seed="x")]
    summary = images_import(study=study, manifest_path=write_manifest(tmp_path / "m.csv", rows), root=root)
    lines = summary.lines()
    assert "rejected: 277" in lines
    assert (
        "  276 rows: file not found under the import root — first 5: row 2 (gone/0.png), "
        "row 3 (gone/1.png), row 4 (gone/2.png), row 5 (gone/3.png), row 6 (gone/4.png), …"
    ) in lines
    assert "  row 278 (sdxl/0.png): seed must be an integer, got 'x'" in lines
    assert len(lines) == 6  # accepted, updated, duplicates, rejected, and the two groups


def test_the_command_reports_the_grouped_problems(db, root, tmp_path):
    StudyFactory(slug="gender")  # imports never create a study
    rows = [row(f"gone/{n}.png", n) for n in range(7)]
    out = io.StringIO()
    with pytest.raises(CommandError, match="7 row"):
        call_command(
            "import_images",
            "--study",
            "gender",
            "--manifest",
            str(write_manifest(tmp_path / "m.csv", rows, header=HEADER)),
            "--root",
            str(root),
            stdout=out,
        )
    text = out.getvalue()
    assert "7 rows: file not found under the import root — first 5: row 2 (gone/0.png)" in text
    assert text.count("file not found") == 1
