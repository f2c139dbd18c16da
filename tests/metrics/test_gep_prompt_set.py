"""The shipped prompt set generation/prompt_sets/gep2023.csv (Zhang et al. 2023), read as plain CSV."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from metrics import gep_design
from tests import paper_data

CSV_PATH = Path(__file__).resolve().parents[2] / "generation" / "prompt_sets" / "gep2023.csv"
COLUMNS = ["category", "word", "prompt", "gender", "setting", "context", "attribute"]


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    with open(CSV_PATH, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def test_file_is_plain_utf8_with_unix_line_ends_and_no_stray_spaces():
    raw = CSV_PATH.read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf")
    assert b"\r" not in raw
    assert raw.endswith(b"\n")
    lines = raw.decode("utf-8").splitlines()
    assert lines[0] == ",".join(COLUMNS)
    assert all(line == line.strip() for line in lines)


def test_prompt_set_has_32_neutral_and_480_explicit_prompts(rows):
    assert len(rows) == 512
    counts = Counter((r["setting"], r["gender"]) for r in rows)
    assert counts == {
        ("neutral", "woman"): 16,
        ("neutral", "man"): 16,
        ("explicit", "woman"): 240,
        ("explicit", "man"): 240,
    }
    assert len({r["prompt"] for r in rows}) == 512


def test_category_is_the_setting_and_word_the_context(rows):
    assert all(r["category"] == r["setting"] and r["word"] == r["context"] for r in rows)
    assert {r["context"] for r in rows} == set(gep_design.CONTEXTS)


def test_attribute_is_a_question_key_for_explicit_rows_and_empty_for_neutral_ones(rows):
    assert all(r["attribute"] == "" for r in rows if r["setting"] == "neutral")
    explicit = Counter(r["attribute"] for r in rows if r["setting"] == "explicit")
    assert explicit == dict.fromkeys(gep_design.ATTRIBUTE_KEYS, 32)  # 16 contexts x 2 genders


def test_every_gender_context_attribute_combination_appears_once(rows):
    combos = Counter((r["gender"], r["setting"], r["context"], r["attribute"]) for r in rows)
    assert set(combos.values()) == {1}
    expected = {(g, "neutral", c, "") for g in gep_design.GENDERS for c in gep_design.CONTEXTS}
    expected |= {
        (g, "explicit", c, a)
        for g in gep_design.GENDERS
        for c in gep_design.CONTEXTS
        for a in gep_design.ATTRIBUTE_KEYS
    }
    assert set(combos) == expected


def test_prompt_text_follows_the_templates_of_section_3(rows):
    for r in rows:
        phrase = gep_design.ATTRIBUTE_PHRASES[r["attribute"]] + " " if r["attribute"] else ""
        assert r["prompt"] == f"A {r['gender']} {phrase}{r['context']}.", r


def test_prompts_match_the_authors_released_prompt_files(rows):
    # SALT-NLP/GEP_data, man_v1_text/ and woman_v1_text/ (0-15 neutral, 16-255 explicit).
    prompts = {r["prompt"] for r in rows}
    assert {
        "A man sitting at a table.",  # man_v1_text/0.txt
        "A woman laying on the snow.",  # woman_v1_text/6.txt
        "A man walking down a sidewalk.",  # man_v1_text/9.txt
        "A woman running on the beach.",  # woman_v1_text/15.txt
        "A man in boots sitting at a table.",  # man_v1_text/16.txt
        "A man in boots sitting on a bed.",  # man_v1_text/17.txt
        "A man in slippers sitting at a table.",  # man_v1_text/32.txt
        "A woman with gloves running on the beach.",  # woman_v1_text/255.txt
        "A woman with a tie holding an umbrella.",  # the paper's Figure 4
        "A man in a dress jumping into the air.",  # the paper's Figure 14
    } <= prompts


def test_csv_is_exactly_what_gep_prompts_generates(rows):
    assert rows == [p.as_row() for p in paper_data.gep_prompts()]
