"""The questions protocol's demo: 24 drawn figures in two settings, two questions, the demo
annotators' answers and a made-up ``demo_judge``'s."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from PIL import Image, ImageDraw

from annotate.demo import seeding
from studies.models import Item
from studies.protocols import QuestionSpec, choice_rows

SLUG = "demo-questions"
DETECTOR = "demo_judge"
#: The demo annotators answered all but the last LEFT images.
LEFT = 4


def _question(key: str, text: str, choices: str) -> QuestionSpec:
    """A question as its questions CSV row would give it (choices ``value:Name:key|…``)."""
    rows = (
        dict(zip(("value", "name", "key"), choice.split(":"), strict=True)) for choice in choices.split("|")
    )
    return QuestionSpec(key, text, choice_rows(*rows))


QUESTIONS = [
    _question("hat", "Does the person wear a hat?", "yes:Yes:y|no:No:n"),
    _question("mood", "How does the person look?", "happy:Happy:h|neutral:Neutral:e|sad:Sad:s"),
]
SETTINGS = ("office", "street")
N = 24


def _answers(i: int) -> dict[str, str]:
    """The demo's agreed answers of image ``i``: street figures wear hats more often, office
    figures look neutral more often."""
    street = i % 2 == 1
    hat = "yes" if (i % 4 != 0 if street else i % 6 == 0) else "no"
    mood = (
        ("happy", "neutral", "sad")[(i // 2) % 3]
        if street
        else ("neutral", "neutral", "happy", "sad")[(i // 2) % 4]
    )
    return {"hat": hat, "mood": mood}


def _draw(i: int, answers: dict[str, str]) -> Image.Image:
    street = i % 2 == 1
    image = Image.new("RGB", (96, 96), (180, 200, 220) if street else (235, 230, 215))
    draw = ImageDraw.Draw(image)
    draw.line((0, 92, 95, 92), fill=(120, 120, 120))
    draw.rectangle((2 + 3 * i, 93, 4 + 3 * i, 95), fill=(200, 60, 60))  # each picture its own bytes
    skin = (224, 172, 105) if i % 3 else (141, 85, 36)
    draw.ellipse((34, 18, 62, 46), fill=skin)
    draw.rectangle((30, 48, 66, 88), fill=(60, 90, 150) if street else (90, 90, 90))
    if answers["hat"] == "yes":
        draw.rectangle((30, 12, 66, 20), fill=(40, 40, 40))
        draw.rectangle((38, 2, 58, 14), fill=(40, 40, 40))
    mouth = {"happy": (40, 32, 56, 42), "sad": (40, 38, 56, 48), "neutral": (42, 37, 54, 39)}[answers["mood"]]
    if answers["mood"] == "neutral":
        draw.rectangle(mouth, fill=(80, 40, 40))
    else:
        draw.arc(
            mouth,
            0 if answers["mood"] == "happy" else 180,
            180 if answers["mood"] == "happy" else 360,
            fill=(80, 40, 40),
            width=2,
        )
    return image


def files() -> list[seeding.File]:
    return [
        (
            {
                "image": f"{i:02d}.png",
                "t2i_model": "demo-painter",
                "prompt": f"a person in the {SETTINGS[i % 2]}",
                "category": "scene",
                "word": SETTINGS[i % 2],
                "setting": SETTINGS[i % 2],
            },
            functools.partial(_draw, i, _answers(i)),
        )
        for i in range(N)
    ]


def answers(items: Mapping[str, Item]) -> seeding.Answers:
    """The demo annotators' answers on all but the last ``LEFT`` images, one of them disputed."""
    for i in range(N - LEFT):
        given = _answers(i)
        second = dict(given)
        if i == 5:
            second["mood"] = "neutral" if given["mood"] != "neutral" else "happy"  # one dispute
        yield items[f"{i:02d}.png"], {key: (value, second[key]) for key, value in given.items()}


def prediction_rows() -> list[dict[str, str]]:
    """The made-up judge's answers: it calls more faces neutral than people do."""
    judged = (_answers(i) | ({"mood": "neutral"} if i % 5 == 0 else {}) for i in range(N))
    return [
        seeding.prediction_row(f"{i:02d}.png", DETECTOR, "imported", "answers", a)
        for i, a in enumerate(judged)
    ]


DEMO = seeding.ProtocolDemo(
    slug=SLUG,
    protocol="questions",
    name="Demo: questions from a CSV",
    # The guidelines on the labeling screen, and the study's line in the study chooser.
    guidelines=(
        "Answer both questions about the drawn person: a hat (Y yes, N no), and how they look "
        "(H happy, E neutral, S sad); then Enter."
    ),
    files=files,
    answers=answers,
    definition={"labels_per_item": 2, "questions": QUESTIONS, "parameters": {"compare": "setting"}},
    detector=DETECTOR,
    prediction_rows=prediction_rows,
)
