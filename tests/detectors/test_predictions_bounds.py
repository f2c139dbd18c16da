"""``import_predictions`` on JSON the database cannot take (issue 19 section 3, "Bad input"): a
``\\u0000`` or a nesting 500 deep in ``output``, ``1e400`` in ``scores``, a NUL character in a
text column — each a row error naming the line and field, nothing written, never a traceback."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from detectors.models import Prediction
from studies.jsonbounds import MAX_JSON_DEPTH
from tests.detectors.test_predictions_io import write_csv
from tests.factories import ItemFactory, PromptFactory, image_of

pytestmark = pytest.mark.django_db

GOOD = '{"label": "male", "reason": "", "scores": {}}'


@pytest.fixture
def images(study):
    prompt = PromptFactory(study=study)
    return [image_of(ItemFactory(prompt=prompt, key=f"sdxl/p/{n}.png")) for n in range(3)]


def deep_output(depth: int) -> str:
    return '{"label": "male", "reason": "", "scores": {}, "x": ' + "[" * depth + "]" * depth + "}"


BAD = [
    (
        {"output": '{"label": "male", "reason": "", "scores": {}, "detail": "a\\u0000b"}'},
        "line 3: output.detail holds a NUL character",
    ),
    ({"output": deep_output(500)}, f"line 3: output is nested deeper than {MAX_JSON_DEPTH} levels"),
    ({"output": deep_output(5000)}, f"line 3: output is nested deeper than {MAX_JSON_DEPTH} levels"),
    (
        {"prediction": "male", "scores": '{"male": 1e400}'},
        "line 3: scores.male holds a number too large to store",
    ),
    ({"prediction": "male", "detail": "x\x00y"}, "line 3: column 'detail' contains a NUL character"),
]
IDS = ["nul-escape-in-output", "output-500-deep", "output-5000-deep", "1e400-in-scores", "nul-in-detail"]


def _import(tmp_path: Path, bad: dict[str, str]) -> str:
    rows = [
        {"image": "sdxl/p/0.png", "detector": "m", "output": GOOD},
        {"image": "sdxl/p/1.png", "detector": "m", **bad},
        {"image": "sdxl/p/2.png", "detector": "m", "output": GOOD},
    ]
    with pytest.raises(CommandError) as info:
        call_command("import_predictions", str(write_csv(tmp_path, rows)), stdout=io.StringIO())
    return str(info.value)


@pytest.mark.parametrize(("bad", "message"), BAD, ids=IDS)
def test_json_out_of_bounds_in_a_prediction_is_a_row_error_and_nothing_is_imported(
    images, tmp_path, bad, message
):
    text = _import(tmp_path, bad)
    assert "Nothing imported: 1 problem(s)" in text
    assert message in text
    assert Prediction.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.parametrize(("bad", "message"), [BAD[0], BAD[3], BAD[4]], ids=[IDS[0], IDS[3], IDS[4]])
def test_on_postgresql_what_it_refuses_is_a_row_error_not_a_database_error(images, tmp_path, bad, message):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...)")
    assert message in _import(tmp_path, bad)
    assert Prediction.objects.count() == 0
