"""The attributes (GEP) demo study ``demo-attributes``: packaged photos of women and men in
both settings for two "T2I models", with shipped demo scores of ``clip_attr``."""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from PIL import Image as PILImage

from annotate.demo import seeding
from annotate.demo.photos import LFW_MEN, LFW_WOMEN, PHOTOS, Look, fit
from metrics.gep_design import ATTRIBUTE_KEYS as KEYS
from studies.models import Item

SLUG = "demo-attributes"
MODELS = ("demo-model-a", "demo-model-b")
DETECTOR = "clip_attr"
VERSION = "demo-imported"
PREDICTIONS_FILE = Path(__file__).resolve().parent / "data" / "attributes_clip_attr.csv"
SIDE = 384


# What each photo shows (the attributes answered yes); any other photo shows none of them.
WEARS: dict[str, frozenset[str]] = {
    "astronaut": frozenset({"uniform", "suit"}),
    "hopper": frozenset({"uniform", "jacket", "tie", "hat", "shirt"}),
    "camera": frozenset({"jacket", "gloves", "shirt"}),
}

# Looks that keep the clothing in view (crops of at most a fifth) and give distinct files.
SAFE_LOOKS = (
    Look(),
    Look(flip=True),
    Look(light=1.1, warm=0.05),
    Look(crop=0.9, flip=True, colour=0.8),
    Look(crop=0.85, dy=-0.2, light=0.95, warm=-0.05),
)
# Looks no other demo gives these LFW faces: no file is shared with another demo study.
TINTED = (Look(warm=0.05), Look(flip=True, warm=0.05))
LIT = (Look(light=1.08), Look(flip=True, light=1.08), Look(light=0.92), Look(flip=True, light=0.92))
WOMAN, MAN = "woman", "man"
NEUTRAL, EXPLICIT = "neutral", "explicit"


@dataclass(frozen=True)
class AttributeImage:
    """One item: where it goes, what its prompt asks, the photo and look it is built from, and
    whether the two demo annotators' answers are seeded (False: left for a visitor)."""

    path: str
    t2i_model: str
    gender: str
    setting: str
    attribute: str
    photo: str
    look: Look
    seeded: bool = True
    side: int = SIDE

    @property
    def prompt(self) -> str:
        if self.setting == EXPLICIT:
            return f"a photo of a {self.gender} with {self.attribute}, at work"
        return f"a photo of a {self.gender} at work"

    @property
    def truth(self) -> dict[str, str]:
        """The answer to every question the item asks, from what the photo shows."""
        keys = (self.attribute,) if self.setting == EXPLICIT else KEYS
        wears = WEARS.get(self.photo, frozenset())
        return {key: "yes" if key in wears else "no" for key in keys}

    @property
    def source(self) -> str:
        return f"{PHOTOS[self.photo].source}, {self.look.describe()}"

    def draw(self) -> PILImage.Image:
        return fit(self.look.of(self.photo), self.side)


# The first demo's four images (same paths and files as before); two are left for a visitor.
_FIRST = tuple(
    AttributeImage(f"photos/{name}.jpg", MODELS[0], gender, NEUTRAL, "", photo, look, seeded=seeded, side=512)
    for name, gender, photo, look, seeded in (
        ("astronaut", WOMAN, "astronaut", Look(), True),
        ("hopper", WOMAN, "hopper", Look(), True),
        ("camera", MAN, "camera", Look(), False),
        ("astronaut_crop", WOMAN, "astronaut", Look(crop=0.7, dy=-0.5, flip=True), False),
    )
)

# Explicit prompts whose image shows the attribute; the others show a face without it (no).
_EXPLICIT_PHOTOS = {
    (WOMAN, "uniform"): ("astronaut", "hopper"),
    (WOMAN, "suit"): ("astronaut", "astronaut"),
    (WOMAN, "tie"): ("hopper", "hopper"),
    (WOMAN, "jacket"): ("hopper", "hopper"),
    (WOMAN, "hat"): ("hopper", "hopper"),
    (WOMAN, "shirt"): ("hopper", "hopper"),
    (MAN, "jacket"): ("camera", "camera"),
    (MAN, "gloves"): ("camera", "camera"),
    (MAN, "shirt"): ("camera", "camera"),
}


def _neutral(model_index: int) -> list[AttributeImage]:
    model = MODELS[model_index]
    if model_index == 0:
        women = [("astronaut", SAFE_LOOKS[1]), ("hopper", SAFE_LOOKS[1])]
        men = [("camera", SAFE_LOOKS[1]), (f"lfw{LFW_MEN[0]}", TINTED[0]), (f"lfw{LFW_MEN[1]}", TINTED[0])]
    else:
        women = [
            ("astronaut", SAFE_LOOKS[2]),
            ("hopper", SAFE_LOOKS[2]),
            (f"lfw{LFW_WOMEN[0]}", TINTED[0]),
            (f"lfw{LFW_WOMEN[1]}", TINTED[1]),
        ]
        men = [
            ("camera", SAFE_LOOKS[2]),
            ("camera", SAFE_LOOKS[3]),
            (f"lfw{LFW_MEN[2]}", TINTED[1]),
            (f"lfw{LFW_MEN[3]}", TINTED[1]),
        ]
    images = []
    for gender, people in ((WOMAN, women), (MAN, men)):
        for n, (photo, look) in enumerate(people):
            # The last man of model b is left for a visitor.
            seeded = not (model_index == 1 and gender == MAN and n == len(people) - 1)
            path = f"{model}/neutral/{gender}_{n}.jpg"
            images.append(AttributeImage(path, model, gender, NEUTRAL, "", photo, look, seeded=seeded))
    return images


def _explicit(model_index: int) -> list[AttributeImage]:
    model = MODELS[model_index]
    faces = {WOMAN: [f"lfw{n}" for n in LFW_WOMEN], MAN: [f"lfw{n}" for n in LFW_MEN]}
    used: dict[str, int] = {WOMAN: 0, MAN: 0}
    images = []
    for gender in (WOMAN, MAN):
        for key in KEYS:
            chosen = _EXPLICIT_PHOTOS.get((gender, key))
            k = KEYS.index(key)
            if chosen:
                # A slightly different crop per attribute and model: every file is distinct.
                photo = chosen[model_index]
                look = Look(crop=0.92, dx=(k % 5 - 2) / 2, dy=(k // 5 - 1) / 2, warm=0.03 * model_index)
            else:
                pool = faces[gender]
                photo = pool[used[gender] % len(pool)]
                look = LIT[(2 * model_index + used[gender] // len(pool)) % len(LIT)]
                used[gender] += 1
            path = f"{model}/explicit/{gender}_{key}.jpg"
            images.append(AttributeImage(path, model, gender, EXPLICIT, key, photo, look))
    # Two more explicit images per model for a visitor; their attribute has answers above.
    for gender, key in ((WOMAN, "tie"), (MAN, "jacket")):
        photo = "hopper" if gender == WOMAN else "camera"
        path = f"{model}/explicit/{gender}_{key}_2.jpg"
        look = Look(crop=0.8, dy=-0.1, light=1.05 + 0.05 * model_index)
        images.append(AttributeImage(path, model, gender, EXPLICIT, key, photo, look, seeded=False))
    return images


def attribute_images() -> list[AttributeImage]:
    """Every item of the attributes demo, the first demo's four first."""
    images = list(_FIRST)
    for model_index in range(len(MODELS)):
        images += _neutral(model_index) + _explicit(model_index)
    return images


#: Seeded disagreements: (path, question) -> annotator 2's answer where it differs from the truth.
DISAGREEMENTS = {(f"{MODELS[0]}/neutral/man_0.jpg", "jacket"): "no"}


def answers(items: Mapping[str, Item]) -> seeding.Answers:
    """The two demo annotators' answers (annotator 2's as ``DISAGREEMENTS`` says), on every image
    but those left for a visitor."""
    for image in attribute_images():
        if image.seeded and image.path in items:
            yield (
                items[image.path],
                {
                    key: (value, DISAGREEMENTS.get((image.path, key), value))
                    for key, value in image.truth.items()
                },
            )


def files() -> list[seeding.File]:
    return [
        (
            {
                "image": image.path,
                "t2i_model": image.t2i_model,
                "prompt": image.prompt,
                "category": "profession",
                "word": image.attribute or "worker",
                "gender": image.gender,
                "setting": image.setting,
                "attribute": image.attribute,
                "source": image.source,
            },
            image.draw,
        )
        for image in attribute_images()
    ]


def _score(rng: random.Random, yes: bool) -> float:
    # A few scores on the wrong side (one in eight), so the ROC-AUC is not a perfect 1.
    wrong = rng.random() < 0.125
    high = yes != wrong
    return round(rng.uniform(0.55, 0.9) if high else rng.uniform(0.05, 0.45), 3)


def prediction_rows() -> list[dict[str, str]]:
    """The rows of ``PREDICTIONS_FILE``: one ``attributes`` output per image, a score per
    attribute drawn around what the photo shows (seeded by the path: the same rows every time)."""
    rows = []
    for image in attribute_images():
        rng = random.Random(zlib.crc32(image.path.encode()))
        wears = WEARS.get(image.photo, frozenset())
        scores = {key: _score(rng, key in wears) for key in KEYS}
        rows.append(seeding.prediction_row(image.path, DETECTOR, VERSION, "attributes", {"scores": scores}))
    return rows


DEMO = seeding.ProtocolDemo(
    slug=SLUG,
    protocol="attributes",
    name="Demo: clothing attributes",
    guidelines="Toggle every item of clothing the person wears (its key), then Enter.",
    files=files,
    answers=answers,
    definition=seeding.TWO_ANNOTATORS,
    detector=DETECTOR,
    version=VERSION,
    prediction_rows=prediction_rows,
    predictions=PREDICTIONS_FILE,
)

if __name__ == "__main__":
    DEMO.predictions_write()
