"""A small questions study: its questions CSV, a manifest with a compared column, and the
labels and detector answers the tests import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def build_report_study(tmp_path: Path, *, slug: str = "qs") -> Any:
    """A questions study with final answers for 8 images (4 light, 4 dark) and two labels each
    on ``age``; one llava answer per image. Rows written directly (the report reads tables)."""
    from annotate.models import FinalLabelSource
    from detectors.models import Prediction
    from studies.models import Question
    from studies.services import questions_csv_read, study_define
    from tests.factories import (
        FinalLabelFactory,
        ItemFactory,
        LabelFactory,
        PromptFactory,
        UserFactory,
        image_of,
    )

    study = study_define(
        slug=slug,
        protocol="questions",
        questions=questions_csv_read(questions_csv(tmp_path)),
        parameters={"compare": "skin"},
        labels_per_item=2,
    ).study
    age = Question.objects.get(study=study, key="age")
    prompt = PromptFactory(study=study, category="profession", word="doctor")
    raters = [UserFactory(username=f"rater{n}") for n in range(2)]
    finals = ["young", "young", "young", "old", "old", "old", "old", "middle"]
    for n, value in enumerate(finals):
        item = ItemFactory(prompt=prompt, metadata={"skin": "light" if n < 4 else "dark"}, key=f"img{n}.png")
        FinalLabelFactory(item=item, question=age, value=value, source=FinalLabelSource.AGREED)
        for rater in raters:
            LabelFactory(item=item, question=age, annotator=rater, value=value)
        Prediction.objects.create(
            image=image_of(item), detector="llava", version="1", kind="answers", output={"age": "young"}
        )
    return study
