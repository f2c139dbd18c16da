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


def define_questions_study(tmp_path: Path, *, slug: str, labels_per_item: int) -> tuple[Any, Any]:
    """A questions study asking ``QUESTIONS``, compared across ``skin``, and its one prompt (doctor)."""
    from studies.services import questions_csv_read, study_define
    from tests.factories import PromptFactory

    study = study_define(
        slug=slug,
        protocol="questions",
        questions=questions_csv_read(questions_csv(tmp_path)),
        parameters={"compare": "skin"},
        labels_per_item=labels_per_item,
    ).study
    return study, PromptFactory(study=study, category="profession", word="doctor")


def build_report_study(tmp_path: Path, *, slug: str = "qs") -> Any:
    """A questions study with final answers for 8 images (4 light, 4 dark) and two labels each
    on ``age``; one llava answer per image. Rows written directly (the report reads tables)."""
    from annotate.models import FinalLabelSource
    from detectors.models import Prediction
    from studies.models import Question
    from tests.factories import (
        FinalLabelFactory,
        ItemFactory,
        LabelFactory,
        UserFactory,
        image_of,
    )

    study, prompt = define_questions_study(tmp_path, slug=slug, labels_per_item=2)
    age = Question.objects.get(study=study, key="age")
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


#: A judge study: per image (T2I model, skin, final age); image 11 has no final age.
JUDGE_ITEMS = [
    ("sdxl", "light", "young"),
    ("sdxl", "light", "young"),
    ("sdxl", "light", "middle"),
    ("sdxl", "dark", "old"),
    ("sdxl", "dark", "old"),
    ("sdxl", "dark", "young"),
    ("dalle", "light", "young"),
    ("dalle", "light", "old"),
    ("dalle", "dark", "old"),
    ("dalle", "dark", "middle"),
    ("dalle", "dark", "old"),
    ("dalle", "light", None),
]
#: vlm_judge@a's probabilities of young / middle / old per image (image 0 failed, image 1 answered
#: only wealth); its answer is the most likely one.
JUDGE_A = [
    None,
    None,
    (0.2, 0.5, 0.3),
    (0.1, 0.2, 0.7),
    (0.3, 0.3, 0.4),
    (0.6, 0.3, 0.1),
    (0.9, 0.05, 0.05),
    (0.5, 0.1, 0.4),
    (0.05, 0.15, 0.8),
    (0.1, 0.3, 0.6),
    (0.2, 0.2, 0.6),
    (0.7, 0.2, 0.1),
]
#: vlm_judge@b's plain answers (no probabilities).
JUDGE_B = ["young", "old", "middle", "old", "young", "young", "young", "old", "old", "old", "old", "young"]
AGES = ("young", "middle", "old")


def build_judge_study(tmp_path: Path, *, slug: str = "qj") -> Any:
    """A questions study (two T2I models, skin light / dark) with final ages for 11 images and
    two versions of ``vlm_judge``: ``a`` with probabilities (one failure, one image it did not
    answer about age), ``b`` with plain answers. Rows written directly."""
    from annotate.models import FinalLabelSource
    from detectors.models import Prediction
    from studies.models import Question
    from tests.factories import FinalLabelFactory, ItemFactory, image_of

    study, prompt = define_questions_study(tmp_path, slug=slug, labels_per_item=1)
    age = Question.objects.get(study=study, key="age")
    for n, (model, skin, final) in enumerate(JUDGE_ITEMS):
        item = ItemFactory(prompt=prompt, metadata={"skin": skin}, t2i_model=model, key=f"j{n}.png")
        if final:
            FinalLabelFactory(item=item, question=age, value=final, source=FinalLabelSource.AGREED)
        image = image_of(item)
        p = JUDGE_A[n]
        if n == 0:
            Prediction.objects.create(
                image=image, detector="vlm_judge", version="a", kind="answers", status="failed", error="boom"
            )
        elif p is None:
            Prediction.objects.create(
                image=image, detector="vlm_judge", version="a", kind="answers", output={"wealth": "rich"}
            )
        else:
            probabilities = dict(zip(AGES, p, strict=True))
            Prediction.objects.create(
                image=image,
                detector="vlm_judge",
                version="a",
                kind="answers",
                output={
                    "answers": {"age": max(probabilities, key=probabilities.__getitem__)},
                    "probabilities": {"age": probabilities},
                },
            )
        Prediction.objects.create(
            image=image, detector="vlm_judge", version="b", kind="answers", output={"age": JUDGE_B[n]}
        )
    return study
