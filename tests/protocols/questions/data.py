"""A small questions study: its questions CSV, a manifest with a compared column, and the
labels and detector answers the tests import."""

from __future__ import annotations

from pathlib import Path

from tests.studies.protocol_data import one_image_manifest, write_csv

QUESTIONS = [
    ["age", "How old does the person look?", "young:Young:y|middle:Middle-aged:m|old:Old:o"],
    ["wealth", "Is the person depicted as wealthy?", "rich:Wealthy:w|poor:Not wealthy:n|unsure:Can't tell:u"],
]
#: The compared column of each of the 12 images (the manifest's extra column ``skin``).
SKIN = ["light", "dark", "light", "dark", "light", "dark", "light", "dark", "light", "dark", "light", "dark"]
#: Both annotators' answers per image (index), where they agree; image 11: they disagree on age.
AGE = ["young", "old", "young", "old", "young", "young", "middle", "old", "young", "old", "old", "young"]
WEALTH = ["rich", "poor", "rich", "poor", "rich", "rich", "unsure", "poor", "rich", "poor", "rich", "poor"]


def questions_csv(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "questions.csv", ["key", "text", "choices"], QUESTIONS)


def manifest(tmp_path: Path, *, skin: list[str] | None = None) -> tuple[Path, Path]:
    return one_image_manifest(tmp_path, len(SKIN), extra={"skin": skin or SKIN})
