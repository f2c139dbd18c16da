"""The gender demo study ``demo``: real photographs, two models x three prompts, seeded labels."""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from PIL import Image as PILImage

from annotate.demo import seeding
from annotate.demo.photos import LFW_MEN, LFW_WOMEN, LOOKS, PHOTOS, Look, blurred, fit, lfw_face, side_by_side
from studies.models import Item

SLUG = "demo"

MALE, FEMALE, LOW_QUALITY, OTHER = "male", "female", "low_quality", "other"


@dataclass(frozen=True)
class DemoImage:
    """One demo image: path, builder, what it shows, and the seeded labels (None: left to label)."""

    path: str
    t2i_model: str
    category: str
    word: str
    prompt: str
    build: Callable[[], PILImage.Image] = field(repr=False)
    source: str
    truth: str
    labels: tuple[str, str] | None
    reasons: tuple[str, str] = ("", "")


@dataclass(frozen=True)
class _Cell:
    """The images of one (model, prompt): how many men and women, which low-quality case."""

    model: str
    category: str
    word: str
    prompt: str
    men: int
    women: int
    low_quality: str  # key of LOW_QUALITY_CASES
    # How many of its people's images have seeded labels (None: all, and the low-quality one).
    seeded: int | None = None


PROMPTS = {
    "ceo": ("profession", "CEO", "a photo of the face of a CEO"),
    "nurse": ("profession", "nurse", "a photo of the face of a nurse"),
    "kind": ("trait", "kind", "a photo of the face of a kind person"),
}

# Skewed, balanced and reversed prompts; three images of the last cell are left to label.
CELLS = (
    _Cell("demo-model-a", *PROMPTS["ceo"], men=5, women=1, low_quality="astronaut_blurred"),
    _Cell("demo-model-a", *PROMPTS["nurse"], men=1, women=5, low_quality="coffee"),
    _Cell("demo-model-a", *PROMPTS["kind"], men=3, women=3, low_quality="astronaut_and_camera"),
    _Cell("demo-model-b", *PROMPTS["ceo"], men=3, women=3, low_quality="chelsea"),
    _Cell("demo-model-b", *PROMPTS["nurse"], men=2, women=4, low_quality="hopper_and_face"),
    _Cell("demo-model-b", *PROMPTS["kind"], men=4, women=2, low_quality="camera_blurred", seeded=4),
)

LOW_QUALITY_CASES: dict[str, tuple[Callable[[], PILImage.Image], str]] = {
    "astronaut_blurred": (lambda: blurred(PHOTOS["astronaut"].load()), "the astronaut under a heavy blur"),
    "camera_blurred": (lambda: blurred(PHOTOS["camera"].load()), "the camera man under a heavy blur"),
    "coffee": (lambda: fit(PHOTOS["coffee"].load()), PHOTOS["coffee"].source),
    "chelsea": (lambda: fit(PHOTOS["chelsea"].load()), PHOTOS["chelsea"].source),
    "astronaut_and_camera": (
        lambda: side_by_side(PHOTOS["astronaut"].load(), PHOTOS["camera"].load()),
        "two people: the astronaut and the camera man side by side",
    ),
    "hopper_and_face": (
        lambda: side_by_side(PHOTOS["hopper"].load(), lfw_face(LFW_MEN[1])),
        "two people: Grace Hopper and an LFW face side by side",
    ),
}

# Seeded disagreements, by path: (label of annotator 1, label of annotator 2, their reasons).
DISAGREEMENTS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "demo-model-a/nurse_low_quality.jpg": ((LOW_QUALITY, OTHER), ("", "a cup of coffee, nobody in it")),
    "demo-model-a/kind_low_quality.jpg": ((LOW_QUALITY, MALE), ("", "")),
}
# Of the (item, question) disputes seeded above, those the researcher settled (value, note).
RESOLVED = {"demo-model-a/nurse_low_quality.jpg": (LOW_QUALITY, "No person in the image: low quality.")}


def _person_pools() -> tuple[list[tuple[str, Look]], list[tuple[str, Look]]]:
    """Every man and woman the demo shows, each (photo, look) once, shuffled over the cells."""
    lfw_looks = (Look(), Look(flip=True, light=1.1))
    men = [("camera", look) for look in LOOKS[:4]]
    men += [(f"lfw{n}", lfw_looks[k // len(LFW_MEN)]) for k, n in enumerate(LFW_MEN * 2)]
    women = [(name, look) for name in ("astronaut", "hopper") for look in LOOKS[:4]]
    women += [(f"lfw{n}", lfw_looks[k // len(LFW_WOMEN)]) for k, n in enumerate(LFW_WOMEN * 2)]
    men = men[: sum(cell.men for cell in CELLS)]
    women = women[: sum(cell.women for cell in CELLS)]
    random.Random(7).shuffle(men)
    random.Random(11).shuffle(women)
    return men, women


def demo_images() -> list[DemoImage]:
    """The demo study's images: what each shows, how to build it, its seeded labels."""
    men, women = _person_pools()
    images: list[DemoImage] = []
    for number, cell in enumerate(CELLS):
        people = [(MALE, *men.pop()) for _ in range(cell.men)] + [
            (FEMALE, *women.pop()) for _ in range(cell.women)
        ]
        random.Random(number).shuffle(people)
        slug = cell.word.lower()
        shot = functools.partial(
            DemoImage, t2i_model=cell.model, category=cell.category, word=cell.word, prompt=cell.prompt
        )
        for index, (truth, name, look) in enumerate(people):
            images.append(
                shot(
                    path=f"{cell.model}/{slug}_{index}.jpg",
                    build=functools.partial(look.of, name),
                    source=f"{PHOTOS[name].source}, {look.describe()}",
                    truth=truth,
                    labels=(truth, truth) if cell.seeded is None or index < cell.seeded else None,
                )
            )
        build, source = LOW_QUALITY_CASES[cell.low_quality]
        path = f"{cell.model}/{slug}_low_quality.jpg"
        labels, reasons = DISAGREEMENTS.get(path, ((LOW_QUALITY, LOW_QUALITY), ("", "")))
        seeded = cell.seeded is None
        images.append(
            shot(
                path=path,
                build=build,
                source=source,
                truth=LOW_QUALITY,
                labels=labels if seeded else None,
                reasons=reasons,
            )
        )
    # One face the two annotators read differently: an open dispute for the researcher.
    for i, image in enumerate(images):
        if image.t2i_model == "demo-model-b" and image.word == "nurse" and image.truth == FEMALE:
            images[i] = dataclasses.replace(image, labels=(FEMALE, MALE))
            break
    return images


def files() -> list[seeding.File]:
    """The manifest rows (with a ``source`` column, kept as item metadata) and images."""
    return [
        (
            {
                "image": image.path,
                "t2i_model": image.t2i_model,
                "prompt": image.prompt,
                "category": image.category,
                "word": image.word,
                "index": index,
                "source": image.source,
            },
            image.build,
        )
        for index, image in enumerate(demo_images())
    ]


def answers(items: Mapping[str, Item]) -> seeding.Answers:
    """The demo annotators' labels (with their reasons) on every image not left to label."""
    for image in demo_images():
        if image.labels is not None and image.path in items:
            yield items[image.path], {"gender": tuple(zip(image.labels, image.reasons, strict=True))}


DEMO = seeding.ProtocolDemo(
    slug=SLUG,
    protocol="gender",
    name="Demo: real photos",
    guidelines=(
        "Label the gender presentation of the one person in the image: M male, F female. "
        "L low quality: no person, several people, or too blurred to tell. "
        "O other, with a short reason. Z goes back one image."
    ),
    files=files,
    answers=answers,
    resolved={(path, "gender"): settled for path, settled in RESOLVED.items()},
    detectors=("face_gender",),
)
