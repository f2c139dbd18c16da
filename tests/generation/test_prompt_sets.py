"""The shipped prompt sets load, their images get unique stable paths, and their extra columns
reach the items (GEP's explicit images asking only their attribute's question)."""

from __future__ import annotations

import csv
import hashlib
import re
from collections import Counter
from pathlib import Path

import pytest

from generation.generation import (
    PROMPT_SET_DIR,
    GenerationError,
    prompt_folder,
    prompt_set_load,
    prompt_sets_available,
    source_path_for,
)
from protocols.attributes.spec import explicit_attribute_question
from studies.imports.images import item_image_store
from studies.ingest import images_import
from studies.models import Item
from studies.protocols import PROTOCOLS, protocol_spec
from tests import paper_data
from tests.factories import StudyFactory, png_bytes

#: Every shipped set with its number of prompts and the metadata columns its items get.
SHIPPED = {
    "lyu2025": (100, set()),
    "mannering2023": (200, {"template", "gender_word", "gender"}),
    "gep2023": (512, {"gender", "setting", "context", "attribute"}),
    "biaspainter2024": (229, {"domain"}),
}
#: Sets whose (category, word) pairs are all distinct: their paths keep the short form.
SHORT_PATHS = ("lyu2025", "mannering2023", "biaspainter2024")


def _rows(name: str) -> list[dict[str, str]]:
    with open(PROMPT_SET_DIR / f"{name}.csv", newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("name", prompt_sets_available())
def test_every_shipped_prompt_set_loads_with_its_columns_as_metadata(name):
    assert name in SHIPPED, f"new shipped set {name}: add its size and columns to SHIPPED"
    count, columns = SHIPPED[name]
    specs = prompt_set_load(name)
    assert len(specs) == count
    assert all(set(spec.metadata) == columns for spec in specs)
    rows = _rows(name)
    assert [spec.text for spec in specs] == [row["prompt"].strip() for row in rows]
    assert [spec.metadata for spec in specs] == [
        {column: row[column].strip() for column in columns} for row in rows
    ]


@pytest.mark.parametrize("name", prompt_sets_available())
def test_every_image_of_a_shipped_set_has_its_own_path(name):
    specs = prompt_set_load(name)
    paths = [
        source_path_for(t2i_model="sdxl", category=s.category, word=s.word, index=i, folder=s.folder)
        for s in specs
        for i in range(3)
    ]
    assert len(set(paths)) == len(paths) == 3 * len(specs)


@pytest.mark.parametrize("name", [n for n in SHORT_PATHS if n in prompt_sets_available()])
def test_sets_with_distinct_category_and_word_keep_the_short_path(name):
    specs = prompt_set_load(name)
    assert all(spec.folder == "" for spec in specs)
    first = specs[0]
    path = source_path_for(t2i_model="sdxl", category=first.category, word=first.word, index=7)
    assert path == f"sdxl/{_part(first.category)}/{_part(first.word)}/7.png"


def test_gep2023_repeats_category_and_word_so_every_prompt_gets_its_own_folder():
    specs = prompt_set_load("gep2023")
    assert Counter(spec.category for spec in specs) == {"neutral": 32, "explicit": 480}
    assert max(Counter((s.category, s.word) for s in specs).values()) == 30  # 15 attributes x 2
    assert len({spec.folder for spec in specs}) == 512
    woman = next(s for s in specs if s.text == "A woman sitting at a table.")
    assert woman.folder == "a_woman_sitting_at_a_table-ae292d1d"
    assert source_path_for(
        t2i_model="sdxl", category=woman.category, word=woman.word, index=0, folder=woman.folder
    ) == (f"sdxl/neutral/sitting_at_a_table/{woman.folder}/0.png")


def _part(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text.strip().lower()).strip("_")


def test_prompt_folder_is_pinned_and_short():
    # Pinned: a changed rule would move every stored gep2023 image to a new path.
    text = "A man in boots standing on a skateboard."
    assert prompt_folder(text) == "a_man_in_boots_standing_on_a_skateboard-c67ac3ef"
    assert prompt_folder(text).endswith(hashlib.sha256(text.encode()).hexdigest()[:8])
    long = prompt_folder("A " + "very " * 40 + "long prompt")
    assert len(long) == 48 + 9
    assert re.fullmatch(r"a_very(_very)*_v-[0-9a-f]{8}", long)
    # Same slug, different texts: the hash tells them apart.
    assert prompt_folder("A man.") != prompt_folder("A man!")


def test_gep2023_is_the_metrics_packages_own_prompt_list():
    specs = prompt_set_load("gep2023")
    expected = [prompt.as_row() for prompt in paper_data.gep_prompts()]
    got = [{"category": s.category, "word": s.word, "prompt": s.text, **s.metadata} for s in specs]
    assert got == expected


def test_mannering2023_prompts_of_a_template_differ_only_in_the_gender_word():
    specs = prompt_set_load("mannering2023")
    by_template: dict[str, list] = {}
    for spec in specs:
        by_template.setdefault(spec.metadata["template"], []).append(spec)
    assert len(by_template) == 50
    for template, group in by_template.items():
        assert sorted(s.metadata["gender_word"] for s in group) == ["boy", "girl", "man", "woman"]
        masked = {re.sub(rf"\b{s.metadata['gender_word']}\b", "{g}", s.text) for s in group}
        assert len(masked) == 1, f"template {template}: {masked}"
        assert {s.metadata["gender"] for s in group if s.metadata["gender_word"] in ("man", "boy")} == {
            "male"
        }


def test_a_category_and_word_may_repeat_and_only_those_prompts_get_a_folder(tmp_path: Path):
    path = tmp_path / "set.csv"
    path.write_text(
        "category,word,prompt\n"
        "scene,kitchen,a man in a kitchen\n"
        "scene,kitchen,a woman in a kitchen\n"
        "scene,garden,a person in a garden\n"
    )
    man, woman, garden = prompt_set_load(str(path))
    assert man.folder == prompt_folder("a man in a kitchen")
    assert woman.folder == prompt_folder("a woman in a kitchen")
    assert garden.folder == ""
    # Decided over the whole file: a subset keeps each prompt's folder.
    assert prompt_set_load(str(path))[:1] == [man]


def test_the_same_prompt_text_twice_is_refused_with_both_lines(tmp_path: Path):
    path = tmp_path / "set.csv"
    path.write_text("category,word,prompt\na,b,a photo\nc,d,a photo\n")
    with pytest.raises(GenerationError, match=r"line 3: prompt 'a photo' already on line 2"):
        prompt_set_load(str(path))


# --- the protocol hook: which questions an item asks ---------------------------------------------


def test_an_explicit_gep_item_asks_only_its_attributes_question():
    hook = protocol_spec("attributes").item_question_keys
    assert hook is explicit_attribute_question
    assert hook({"setting": "explicit", "attribute": "boots", "gender": "woman"}) == ["boots"]
    assert hook({"setting": "neutral", "attribute": ""}) == []
    assert hook({"setting": "explicit", "attribute": "cape"}) == []  # not a question of the preset
    assert hook({}) == []


def test_every_other_protocol_asks_every_question_whatever_the_metadata():
    explicit = {"setting": "explicit", "attribute": "boots"}
    for key, spec in PROTOCOLS.items():
        if key != "attributes":
            assert spec.item_question_keys(explicit) == [], key


def test_every_explicit_gep2023_prompt_names_a_question_of_the_attributes_preset():
    preset = {question.key for question in protocol_spec("attributes").questions}
    for spec in prompt_set_load("gep2023"):
        keys = explicit_attribute_question(spec.metadata)
        if spec.metadata["setting"] == "explicit":
            assert keys == [spec.metadata["attribute"]]
            assert keys[0] in preset
        else:
            assert keys == []


@pytest.mark.django_db
def test_a_stored_image_gets_its_question_keys_from_the_protocol():
    study = StudyFactory(protocol="attributes", slug="gep")
    explicit, _ = item_image_store(
        study=study, data=png_bytes(1), key="a.png", metadata={"setting": "explicit", "attribute": "hat"}
    )
    neutral, _ = item_image_store(
        study=study, data=png_bytes(2), key="b.png", metadata={"setting": "neutral", "attribute": ""}
    )
    assert (explicit.question_keys, neutral.question_keys) == (["hat"], [])
    gender_item, _ = item_image_store(
        study=StudyFactory(slug="g"), data=png_bytes(3), key="c.png", metadata={"setting": "explicit"}
    )
    assert gender_item.question_keys == []


@pytest.mark.django_db
def test_a_manifest_without_questions_lets_the_protocol_choose_and_a_questions_cell_wins(tmp_path: Path):
    study = StudyFactory(protocol="attributes", slug="gep")
    root = tmp_path / "images"
    root.mkdir()
    for n in range(3):
        (root / f"{n}.png").write_bytes(png_bytes(10 + n))
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(
        "image,t2i_model,prompt,category,word,setting,attribute,questions\n"
        "0.png,sdxl,A woman in boots.,explicit,x,explicit,boots,\n"
        "1.png,sdxl,A man.,neutral,x,neutral,,\n"
        "2.png,sdxl,A man in a hat.,explicit,y,explicit,hat,hat tie\n"
    )
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert (summary.accepted, summary.rejected) == (3, [])
    keys = dict(Item.objects.values_list("key", "question_keys"))
    assert keys == {"0.png": ["boots"], "1.png": [], "2.png": ["hat", "tie"]}
