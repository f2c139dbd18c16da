"""The questions protocol's demo: 24 drawn figures in two settings, two questions, the demo
annotators' answers and a made-up ``demo_judge``'s."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from PIL import Image, ImageDraw

SLUG = "demo-questions"
NAME = "Demo: questions from a CSV"
# The guidelines on the labeling screen, and the study's line in the study chooser.
DESCRIPTION = (
    "Answer both questions about the drawn person: a hat (Y yes, N no), and how they look "
    "(H happy, E neutral, S sad); then Enter."
)
DETECTOR = "demo_judge"
# The demo's own annotators: they answered all but the last LEFT images.
ANNOTATORS = ("demo-annotator-1", "demo-annotator-2")
LEFT = 4
QUESTIONS = [
    ["hat", "Does the person wear a hat?", "yes:Yes:y|no:No:n"],
    ["mood", "How does the person look?", "happy:Happy:h|neutral:Neutral:e|sad:Sad:s"],
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


def folder_write(folder: Path) -> dict[str, Path]:
    """Write the demo's files under ``folder``: images, questions, manifest, labels, detector
    answers; returns their paths by name."""
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.csv" for name in ("questions", "manifest", "labels", "predictions")}
    with open(paths["questions"], "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["key", "text", "choices"])
        writer.writerows(QUESTIONS)
    manifest, labels, predictions = [], [], []
    for i in range(N):
        answers = _answers(i)
        name = f"{i:02d}.png"
        _draw(i, answers).save(images / name)
        setting = SETTINGS[i % 2]
        manifest.append([name, "demo-painter", f"a person in the {setting}", "scene", setting, setting])
        for n, annotator in enumerate(ANNOTATORS if i < N - LEFT else ()):
            given = dict(answers)
            if i == 5 and n == 1:
                given["mood"] = "neutral" if answers["mood"] != "neutral" else "happy"  # one dispute
            labels += [[name, annotator, key, value] for key, value in given.items()]
        judged = dict(answers)
        if i % 5 == 0:
            judged["mood"] = "neutral"  # the judge calls more faces neutral than people do
        predictions.append([name, DETECTOR, "answers", json.dumps(judged)])
    for name, header, rows in (
        ("manifest", ["image", "t2i_model", "prompt", "category", "word", "setting"], manifest),
        ("labels", ["image", "annotator", "question", "label"], labels),
        ("predictions", ["image", "detector", "kind", "output"], predictions),
    ):
        with open(paths[name], "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(rows)
    paths["root"] = images
    return paths
