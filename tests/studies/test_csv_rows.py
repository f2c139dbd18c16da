"""``studies.imports.csv_rows_stream``: the rows every import reads, as csv.DictReader gives them
(the reader builds them from csv.reader's lists, which costs less than half as much)."""

from __future__ import annotations

import csv
import random

import pytest

from studies.csvio import read_cell
from studies.errors import ImportRejected
from studies.imports import csv_rows_stream


def _dict_reader_rows(path) -> list[tuple[int, dict[str, str]]]:
    """What the importers read before: csv.DictReader, cells through ``read_cell``."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        reader.fieldnames = [name.strip() for name in reader.fieldnames or []]
        rows = []
        for number, raw in enumerate(reader, start=2):
            if raw.get(None):
                rows.append((number, {"__error__": "more cells than header columns"}))
            else:
                rows.append((number, {k: read_cell(v) for k, v in raw.items() if k is not None}))
        return rows


def test_rows_are_those_of_csv_dictreader_blank_lines_short_and_long_rows_included(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(
        "\ufeff image , label ,note\n"
        "a.png, male ,'=1+1\n"
        "\n"  # a blank line: skipped, and not counted
        "b.png,female\n"  # a short row: the missing cells are empty
        "c.png,male,,\n"  # one cell too many, even empty: refused
        '"d,\n.png",male,"two\nlines"\n'
        "e.png,male,'plain\n",
        encoding="utf-8",
    )
    header, rows = csv_rows_stream(path, required=("image", "label"))
    assert header == ["image", "label", "note"]
    got = list(rows)
    assert got == _dict_reader_rows(path)
    assert got[:3] == [
        (2, {"image": "a.png", "label": "male", "note": "=1+1"}),  # the export's quote removed
        (3, {"image": "b.png", "label": "female", "note": ""}),
        (4, {"__error__": "more cells than header columns"}),
    ]
    assert got[4] == (6, {"image": "e.png", "label": "male", "note": "'plain"})  # a quote kept


def test_random_files_read_as_csv_dictreader_reads_them(tmp_path):
    rng = random.Random(5)
    cells = ["", " x ", "'=a", "'b", "a,b", 'q"q', "line\nbreak", "ü", "  "]
    for n in range(30):
        path = tmp_path / f"{n}.csv"
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["a", " b", "c "])
            for _ in range(rng.randrange(0, 12)):
                writer.writerow([rng.choice(cells) for _ in range(rng.choice([0, 1, 2, 3, 3, 3, 4]))])
        assert list(csv_rows_stream(path, required=("a",))[1]) == _dict_reader_rows(path), n


def test_a_field_over_the_size_limit_names_the_line_it_ends_on(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("a,b\n1,2\n3," + "p" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(ImportRejected, match=r"m\.csv: not a readable CSV file near line 3"):
        list(csv_rows_stream(path, required=("a",))[1])
