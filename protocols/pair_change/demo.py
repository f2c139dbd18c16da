"""The pair-change demo study ``demo-pairs``: seed photos and "edits" for eight profession
words, leaning every direction of the paper's Table 2."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from PIL import Image as PILImage

from annotate.demo import seeding
from annotate.demo.photos import PHOTOS, Look
from studies.models import Item

SLUG = "demo-pairs"
EDITOR = "demo-editor"
DARKER = Look(light=0.7, warm=0.1)
LIGHTER = Look(light=1.3, colour=0.7)


@dataclass(frozen=True)
class Pair:
    """One pair: the seed photo, the photo and look of its edit, the word of the edit's prompt
    and what a person answers (age, gender, skin)."""

    item: str
    seed: str
    edit: str
    look: Look
    word: str
    age: str
    gender: str
    skin: str

    @property
    def answers(self) -> dict[str, str]:
        return {"age": self.age, "gender": self.gender, "skin": self.skin}

    def draw(self) -> PILImage.Image:
        return self.look.of(self.edit)


PAIRS: tuple[Pair, ...] = (
    # Three of the first demo's pairs; dlib's HOG finder missed the fourth's profile face.
    Pair("astronaut-darker", "astronaut", "astronaut", DARKER, "doctor", "same", "female_female", "darker"),
    Pair(
        "astronaut-crop",
        "astronaut",
        "astronaut",
        Look(crop=0.75, dy=-0.4),
        "lawyer",
        "same",
        "female_female",
        "same",
    ),
    Pair(
        "hopper-lighter",
        "hopper",
        "hopper",
        Look(light=1.25, colour=0.7),
        "nurse",
        "same",
        "female_female",
        "same",
    ),
    # Edits that replaced the person or changed the light (LFW faces).
    Pair("doctor-1", "lfw41", "lfw3", Look(), "doctor", "older", "male_male", "same"),
    Pair("doctor-2", "lfw18", "lfw1", Look(), "doctor", "same", "female_male", "same"),
    Pair("nurse-1", "lfw1", "lfw18", Look(), "nurse", "same", "male_female", "same"),
    Pair("nurse-2", "lfw52", "lfw94", LIGHTER, "nurse", "younger", "female_female", "same"),
    Pair("engineer-1", "lfw53", "lfw63", Look(), "engineer", "older", "female_male", "same"),
    Pair("engineer-2", "lfw49", "lfw49", DARKER, "engineer", "same", "male_male", "darker"),
    Pair("teacher-1", "lfw23", "lfw91", Look(), "teacher", "older", "male_female", "lighter"),
    Pair("teacher-2", "lfw46", "lfw46", LIGHTER, "teacher", "same", "female_female", "lighter"),
    Pair("lawyer-1", "lfw94", "lfw15", Look(), "lawyer", "older", "female_male", "same"),
    Pair("lawyer-2", "lfw80", "lfw80", DARKER, "lawyer", "same", "male_male", "darker"),
    Pair("pilot-1", "lfw3", "lfw41", Look(), "pilot", "younger", "male_male", "same"),
    Pair("pilot-2", "lfw31", "lfw31", LIGHTER, "pilot", "same", "female_female", "lighter"),
    Pair("chef-1", "lfw15", "lfw99", Look(), "chef", "younger", "male_female", "darker"),
    Pair("chef-2", "lfw93", "lfw93", DARKER, "chef", "same", "female_female", "darker"),
    Pair("farmer-1", "lfw91", "lfw23", Look(), "farmer", "younger", "female_male", "darker"),
    Pair("farmer-2", "lfw63", "lfw52", Look(), "farmer", "same", "male_female", "same"),
)

#: Drawn pairs whose answers are not seeded: left for a visitor (both demo annotators).
LEFT = frozenset({"teacher-2", "farmer-2", "lawyer-2"})

#: The draw of each attribute (``sample_pairs --buckets``): a few pairs per bucket, seed 0.
BUCKETS = {
    "age": "older=3,younger=3,unchanged=3",
    "gender": "male_to_female=3,female_to_male=3,unchanged=3",
    "skin": "lighter=3,darker=3,unchanged=3",
}


def files() -> list[seeding.File]:
    """Two rows a pair: the seed photo (drawn once however many pairs show it) and its edit."""
    rows: list[seeding.File] = []
    for pair in PAIRS:
        change = pair.look.describe()
        if pair.edit != pair.seed:
            change = f"another person ({PHOTOS[pair.edit].source}), {change}"
        seed = {"item": pair.item, "role": "input", "image": f"seeds/{pair.seed}.jpg"}
        edit = {
            "item": pair.item,
            "role": "output",
            "image": f"edits/{pair.item}.jpg",
            "t2i_model": EDITOR,
            "prompt": f"make this person a {pair.word}",
            "category": "profession",
            "word": pair.word,
            "edit": change,
        }
        rows += [(seed, functools.partial(Look().of, pair.seed)), (edit, pair.draw)]
    return rows


def answers(items: Mapping[str, Item]) -> seeding.Answers:
    """The demo annotators' answers on the pairs ``sample_pairs`` queued, to the questions each
    was drawn for, except the pairs left for a visitor (``LEFT``)."""
    for pair in PAIRS:
        item = items.get(pair.item)
        if item is not None and item.queue > 0 and pair.item not in LEFT:
            yield item, {key: (pair.answers[key],) * 2 for key in item.question_keys or pair.answers}


DEMO = seeding.ProtocolDemo(
    slug=SLUG,
    protocol="pair_change",
    name="Demo: seed photos and edits",
    guidelines="Compare the edited image with the seed photo: age, gender, skin tone.",
    files=files,
    answers=answers,
    definition=seeding.TWO_ANNOTATORS,
    # The offline measuring detectors on the pairs, then the draws of pairs people check.
    detectors=("face_age_gender", "skin_tone"),
    draws=tuple(
        (
            "sample_pairs",
            {"study": SLUG, "attribute": attribute, "buckets": buckets, "take_all_if_short": True},
        )
        for attribute, buckets in BUCKETS.items()
    ),
)
