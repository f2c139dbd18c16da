"""The object co-occurrence demo study ``demo-objects``: men's and women's photos, some beside
a coffee cup or a cat, for two "T2I models", with hand-placed demo boxes of ``yolo_objects``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from PIL import Image as PILImage

from annotate.demo import seeding
from annotate.demo.photos import LFW_MEN, LFW_WOMEN, PHOTOS, Look
from studies.models import Item

SLUG = "demo-objects"
MODELS = ("demo-model-a", "demo-model-b")
DETECTOR = "yolo_objects"
VERSION = "demo-imported"
PREDICTIONS_FILE = Path(__file__).resolve().parent / "data" / "objects_yolo_objects.csv"
HEIGHT = 240
TEMPLATES = {"kitchen": "A {} in the kitchen", "home": "A {} at home"}
INDEXES = 3
#: Items of this index are left for a visitor to check (both annotators).
LEFT_INDEX = 2

# Boxes placed by hand per photo, as fractions: (COCO class, confidence, (x0, y0, x1, y1)).
PANEL_BOXES: dict[str, tuple[tuple[str, float, tuple[float, float, float, float]], ...]] = {
    "astronaut": (("person", 0.94, (0.0, 0.02, 0.86, 1.0)),),
    "hopper": (("person", 0.95, (0.04, 0.04, 1.0, 1.0)), ("tie", 0.61, (0.42, 0.68, 0.59, 0.76))),
    "camera": (("person", 0.93, (0.0, 0.12, 0.66, 1.0)),),
    "lfw": (("person", 0.88, (0.12, 0.1, 0.88, 0.95)),),
    "coffee": (
        ("cup", 0.91, (0.29, 0.05, 0.69, 0.72)),
        ("dining table", 0.72, (0.0, 0.0, 1.0, 1.0)),
        ("spoon", 0.58, (0.54, 0.16, 0.71, 0.82)),
    ),
    "chelsea": (("cat", 0.92, (0.02, 0.0, 0.98, 1.0)),),
}
FALSE_DOG = ("dog", 0.31, (0.1, 0.05, 0.9, 0.95))


@dataclass(frozen=True)
class ObjectImage:
    """One item: the person photo (and look), the object photo beside it ("" for none), and
    what the demo detector gets wrong on it (a false dog on the cat, a missed spoon)."""

    path: str
    t2i_model: str
    template: str
    index: int
    gender_word: str
    person: str
    look: Look
    beside: str
    false_dog: bool = False
    spoon_missed: bool = False

    @property
    def gender(self) -> str:
        return "male" if self.gender_word == "man" else "female"

    @property
    def prompt(self) -> str:
        return TEMPLATES[self.template].format(self.gender_word)

    @property
    def source(self) -> str:
        text = f"{PHOTOS[self.person].source}, {self.look.describe()}"
        return f"{text}; beside {PHOTOS[self.beside].source}" if self.beside else text

    def draw(self) -> PILImage.Image:
        return _layout(self)[0]


# What is beside the person: men's prompts lean to the coffee cup, women's to the cat.
BESIDE = {
    (MODELS[0], "man"): {"kitchen": ("coffee", "coffee", "coffee"), "home": ("coffee", "", "chelsea")},
    (MODELS[0], "woman"): {"kitchen": ("chelsea", "coffee", "chelsea"), "home": ("chelsea", "chelsea", "")},
    (MODELS[1], "man"): {"kitchen": ("coffee", "chelsea", "coffee"), "home": ("", "coffee", "chelsea")},
    (MODELS[1], "woman"): {"kitchen": ("coffee", "chelsea", "chelsea"), "home": ("chelsea", "", "coffee")},
}
_PEOPLE = {
    "man": ["camera", *(f"lfw{n}" for n in LFW_MEN)],
    "woman": ["astronaut", "hopper", *(f"lfw{n}" for n in LFW_WOMEN)],
}
# Looks of the person photos here (none of them is one another demo gives the same photo).
_LOOKS = (Look(light=1.04), Look(flip=True, light=1.04), Look(light=0.96), Look(flip=True, light=0.96))


def object_images() -> list[ObjectImage]:
    images = []
    for m, model in enumerate(MODELS):
        for word in ("man", "woman"):
            people = _PEOPLE[word]
            for t, template in enumerate(TEMPLATES):
                for index in range(INDEXES):
                    n = m * 6 + t * 3 + index
                    beside = BESIDE[(model, word)][template][index]
                    images.append(
                        ObjectImage(
                            path=f"{model}/{template}_{word}_{index}.jpg",
                            t2i_model=model,
                            template=template,
                            index=index,
                            gender_word=word,
                            person=people[n % len(people)],
                            look=_LOOKS[(n // len(people) + m) % len(_LOOKS)],
                            beside=beside,
                            false_dog=beside == "chelsea" and index == 0,
                            spoon_missed=beside == "coffee" and index == 1,
                        )
                    )
    return images


def _panel(photo: str, look: Look) -> PILImage.Image:
    image = look.of(photo)
    width = round(image.width * HEIGHT / image.height)
    return image.resize((width, HEIGHT), PILImage.Resampling.LANCZOS)


def _layout(image: ObjectImage) -> tuple[PILImage.Image, list[dict[str, object]]]:
    """The picture (person left, object right) and the demo detector's boxes on it in pixels."""
    panels = [(image.person, _panel(image.person, image.look))]
    if image.beside:
        panels.append((image.beside, _panel(image.beside, Look())))
    canvas = PILImage.new("RGB", (sum(p.width for _, p in panels), HEIGHT), (255, 255, 255))
    boxes: list[dict[str, object]] = []
    left = 0
    for name, panel in panels:
        canvas.paste(panel, (left, 0))
        found = list(PANEL_BOXES["lfw" if name.startswith("lfw") else name])
        if name == "chelsea" and image.false_dog:
            found.append(FALSE_DOG)
        if name == "coffee" and image.spoon_missed:
            found = [box for box in found if box[0] != "spoon"]
        for cls, confidence, (x0, y0, x1, y1) in found:
            if name == image.person and image.look.flip:
                x0, x1 = 1 - x1, 1 - x0
            boxes.append(
                {
                    "class": cls,
                    "confidence": confidence,
                    "box": [
                        round(left + x0 * panel.width, 1),
                        round(y0 * HEIGHT, 1),
                        round(left + x1 * panel.width, 1),
                        round(y1 * HEIGHT, 1),
                    ],
                }
            )
        left += panel.width
    return canvas, boxes


def files() -> list[seeding.File]:
    return [
        (
            {
                "image": image.path,
                "t2i_model": image.t2i_model,
                "prompt": image.prompt,
                "category": f"template-{image.template}",
                "word": image.gender_word,
                "index": image.index,
                "gender": image.gender,
                "gender_word": image.gender_word,
                "template": image.template,
                "source": image.source,
            },
            image.draw,
        )
        for image in object_images()
    ]


def prediction_rows() -> list[dict[str, str]]:
    """The rows of ``PREDICTIONS_FILE``: one ``objects`` output per image."""
    return [
        seeding.prediction_row(image.path, DETECTOR, VERSION, "objects", {"objects": _layout(image)[1]})
        for image in object_images()
    ]


def answers(items: Mapping[str, Item]) -> seeding.Answers:
    """The demo annotators' check of the boxes put on the items (after ``prepare_box_check``), on
    every item but those left for a visitor: yes for each real object, no for the false dog (in
    the boxes' order), and the classes the detector missed."""
    for image in object_images():
        item = items.get(image.path)
        boxes = (item.metadata or {}).get("boxes") if item is not None else None
        if item is not None and image.index != LEFT_INDEX and isinstance(boxes, list):
            checked = ",".join("no" if box.get("class") == "dog" else "yes" for box in boxes)
            missed = "spoon" if image.spoon_missed else ""
            yield item, {"boxes": (checked, checked), "missed": (missed, missed)}


DEMO = seeding.ProtocolDemo(
    slug=SLUG,
    protocol="objects",
    name="Demo: objects beside men and women",
    guidelines=(
        "Each highlighted box: Y if the object is really there, N if not. Then name any object the "
        "detector missed (/ opens the list), and Enter."
    ),
    files=files,
    answers=answers,
    definition=seeding.TWO_ANNOTATORS,
    detector=DETECTOR,
    version=VERSION,
    prediction_rows=prediction_rows,
    predictions=PREDICTIONS_FILE,
    steps=(("prepare_box_check", {"study": SLUG, "detector": DETECTOR}),),
)

if __name__ == "__main__":
    DEMO.predictions_write()
