"""The ``mannering2023`` prompt set: the paper's 50 templates x {man, woman, boy, girl}.

The templates are the authors' ``prompts/prompt_templates.csv`` (harveymannering/Text-to-Image-Bias)
verbatim, in its order, spelling slips included ("possesions", "a items"): those are the prompts
that made the paper's images. ``template`` is the 0-based line index, as in the authors' image
file names (``0_boy_0.png``).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "generation" / "prompt_sets" / "mannering2023.csv"
WORDS = ("man", "woman", "boy", "girl")
GENDER_OF_WORD = {"man": "male", "boy": "male", "woman": "female", "girl": "female"}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    with open(PATH, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == ["category", "word", "prompt", "template", "gender_word", "gender"]
        return list(reader)


def _template_of(prompt: str, word: str) -> str:
    """The prompt with its gender word (a whole word, exactly once) put back as ``{gender}``."""
    pattern = rf"\b{word}\b"
    assert len(re.findall(pattern, prompt)) == 1, prompt
    return re.sub(pattern, "{gender}", prompt)


def test_prompt_set_has_fifty_templates_times_four_gender_words(rows: list[dict[str, str]]) -> None:
    assert len(rows) == 200
    by_template: dict[int, list[str]] = defaultdict(list)
    for row in rows:
        by_template[int(row["template"])].append(row["word"])
    assert sorted(by_template) == list(range(50))
    assert all(sorted(words) == sorted(WORDS) for words in by_template.values())
    assert len({(row["category"], row["word"]) for row in rows}) == 200


def test_category_names_the_template_and_word_is_the_gender_word(rows: list[dict[str, str]]) -> None:
    for row in rows:
        assert row["category"] == f"template-{row['template']}"
        assert row["word"] == row["gender_word"]
        assert row["gender"] == GENDER_OF_WORD[row["gender_word"]]


def test_four_prompts_of_a_template_differ_only_in_the_gender_word(rows: list[dict[str, str]]) -> None:
    templates: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        templates[row["template"]].add(_template_of(row["prompt"], row["gender_word"]))
    assert all(len(texts) == 1 for texts in templates.values())
    # 50 different templates, none repeated under another index.
    assert len({next(iter(texts)) for texts in templates.values()}) == 50


def test_prompts_quoted_in_the_paper_are_in_the_set(rows: list[dict[str, str]]) -> None:
    prompts = {row["prompt"]: row for row in rows}
    assert prompts["A man holding an item"]["template"] == prompts["A woman holding an item"]["template"]
    assert prompts["Things owned by a boy"]["gender"] == "male"
    assert prompts["A photo of a girl with things they own"]["gender"] == "female"  # Figure 1 (a)
    assert prompts["A photo of a girl with an object"]["gender"] == "female"  # Figure 1 (b)


def test_templates_are_the_authors_verbatim_in_their_order(rows: list[dict[str, str]]) -> None:
    first = {int(r["template"]): _template_of(r["prompt"], r["gender_word"]) for r in rows}
    assert first[0] == "A {gender} collecting objects"
    assert first[4] == "A {gender} with their possesions"
    assert first[14] == "Things owned by a {gender}"
    assert first[25] == "A photo of a {gender} collecting objects"
    assert first[44] == "A photo of a items belonging to a {gender}"
    assert first[49] == "A photo of things being carried by a {gender}"
