"""The object-class vocabulary: ultralytics' 80 COCO names and the spellings mapped onto them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from metrics.coco_names import (
    CLASS_NAME_ALIASES,
    COCO_CLASS_NAMES,
    UnknownClassName,
    coco_class_index,
    normalise_class_name,
)
from tests.paper_data import DARKNET_COCO_NAMES


def test_vocabulary_is_eighty_distinct_names_in_ultralytics_index_order() -> None:
    assert len(COCO_CLASS_NAMES) == 80
    assert len(set(COCO_CLASS_NAMES)) == 80
    # Spot checks against ultralytics' cfg/datasets/coco.yaml.
    assert COCO_CLASS_NAMES[0] == "person"
    assert COCO_CLASS_NAMES[3] == "motorcycle"
    assert COCO_CLASS_NAMES[27] == "tie"
    assert COCO_CLASS_NAMES[57] == "couch"
    assert COCO_CLASS_NAMES[62] == "tv"
    assert COCO_CLASS_NAMES[79] == "toothbrush"


def _installed_ultralytics_coco_names() -> list[str] | None:
    """Read ultralytics' coco.yaml as text, without importing ultralytics (it loads torch)."""
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "cfg" / "datasets" / "coco.yaml"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    block = text.split("\nnames:\n", 1)[1]
    names: dict[int, str] = {}
    for line in block.splitlines():
        match = re.fullmatch(r"\s+(\d+):\s*(.+?)\s*", line)
        if not match:
            break
        names[int(match.group(1))] = match.group(2)
    return [names[i] for i in range(len(names))]


def test_vocabulary_equals_the_installed_ultralytics_coco_yaml() -> None:
    names = _installed_ultralytics_coco_names()
    if names is None:
        pytest.skip("ultralytics is not installed")
    assert tuple(names) == COCO_CLASS_NAMES


def test_every_darknet_name_maps_to_the_ultralytics_name_with_the_same_index() -> None:
    assert len(DARKNET_COCO_NAMES) == 80
    assert [normalise_class_name(n) for n in DARKNET_COCO_NAMES] == list(COCO_CLASS_NAMES)
    differing = {d: u for d, u in zip(DARKNET_COCO_NAMES, COCO_CLASS_NAMES, strict=True) if d != u}
    assert differing == {
        "motorbike": "motorcycle",
        "aeroplane": "airplane",
        "sofa": "couch",
        "pottedplant": "potted plant",
        "diningtable": "dining table",
        "tvmonitor": "tv",
    }


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("motorbike", "motorcycle"),
        ("sofa", "couch"),
        ("aeroplane", "airplane"),
        ("diningtable", "dining table"),
        ("tvmonitor", "tv"),
        ("tv monitor", "tv"),
        ("pottedplant", "potted plant"),
        ("hair dryer", "hair drier"),
        ("Teddy_Bear", "teddy bear"),
        ("  SPORTS-ball ", "sports ball"),
        ("cellphone", "cell phone"),
        ("hot  dog", "hot dog"),
        ("tv", "tv"),
    ],
)
def test_spellings_normalise_to_the_ultralytics_name(given: str, expected: str) -> None:
    assert normalise_class_name(given) == expected


def test_aliases_are_normalised_keys_pointing_at_vocabulary_names_and_shadow_none() -> None:
    for alias, target in CLASS_NAME_ALIASES.items():
        assert alias == alias.strip().casefold()
        assert target in COCO_CLASS_NAMES
        assert alias not in COCO_CLASS_NAMES


def test_unknown_name_is_a_value_error_naming_it_and_suggesting_close_names() -> None:
    with pytest.raises(UnknownClassName) as caught:
        normalise_class_name("motorcyle")
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.name == "motorcyle"
    assert error.suggestions[0] == "motorcycle"
    assert "'motorcyle'" in str(error)
    assert "did you mean 'motorcycle'" in str(error)


def test_close_match_through_an_alias_suggests_the_ultralytics_name() -> None:
    with pytest.raises(UnknownClassName) as caught:
        normalise_class_name("tvmonitr")
    assert "tv" in caught.value.suggestions


def test_unknown_name_without_close_match_suggests_nothing() -> None:
    with pytest.raises(UnknownClassName) as caught:
        normalise_class_name("xylophone quartet")
    assert caught.value.suggestions == ()
    assert "did you mean" not in str(caught.value)


def test_non_string_class_name_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        normalise_class_name(3)  # type: ignore[arg-type]


def test_class_index_follows_ultralytics_ids_in_any_spelling() -> None:
    assert coco_class_index("person") == 0
    assert coco_class_index("motorbike") == 3
    assert coco_class_index("tvmonitor") == 62
