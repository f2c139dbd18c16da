"""What a judge asks in a study, read from the database: ``study_ask`` (the study's questions as a
``StudyAsk``) and ``image_question_keys`` (which of them each image's items ask)."""

from __future__ import annotations

from collections.abc import Iterable

from detectors.judges import (
    GENDER_CHOICES,
    GENDER_KEY,
    KIND_ANSWERS,
    JudgeQuestion,
    StudyAsk,
    StudyAskError,
)
from detectors.kinds import KIND_ATTRIBUTES, KIND_GENDER
from studies.batching import in_chunks
from studies.models import ItemImage, Study
from studies.protocols import protocol_spec
from studies.selectors import study_questions

#: The output kinds of the studies a judge answers with its ``answers`` outputs.
ANSWERED_KINDS = (KIND_ATTRIBUTES, KIND_ANSWERS)


def study_ask(study: Study | None, *, judge: str) -> StudyAsk:
    """Every question ``judge`` asks in ``study``; StudyAskError (one line) when there is none to
    ask: no study, a study without questions, a protocol whose outputs a judge cannot give."""
    if study is None:
        raise StudyAskError(f"{judge} asks a study's questions: name the study (--study SLUG).")
    kinds = protocol_spec(study.protocol).output_kinds
    questions = study_questions(study)
    if KIND_GENDER in kinds:
        gender = next((q for q in questions if q.key == GENDER_KEY), None)
        if gender is None:
            raise StudyAskError(f"study '{study.slug}' has no '{GENDER_KEY}' question for {judge} to ask.")
        return StudyAsk(KIND_GENDER, (JudgeQuestion(GENDER_KEY, gender.text, GENDER_CHOICES),))
    if not any(kind in ANSWERED_KINDS for kind in kinds):
        raise StudyAskError(
            f"{judge} cannot answer study '{study.slug}': its protocol {study.protocol} reads "
            f"{', '.join(kinds) or 'no'} outputs; a judge answers studies read as "
            f"{', '.join((KIND_GENDER, *ANSWERED_KINDS))}."
        )
    asked = tuple(
        JudgeQuestion(
            q.key,
            q.text,
            tuple((str(c["value"]), str(c.get("name") or c["value"])) for c in q.choices),
        )
        for q in questions
        if isinstance(q.choices, list) and len(q.choices) >= 2
    )
    if not asked:
        raise StudyAskError(f"study '{study.slug}' has no question with choices for {judge} to ask.")
    return StudyAsk(KIND_ANSWERS, asked)


def image_question_keys(study: Study, image_ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    """Image id → the keys of the questions the study's items using it ask (``()``: every
    question; an image in several items is asked the union). One query per chunk of ids."""
    keys: dict[int, set[str] | None] = {}
    for chunk in in_chunks(list(image_ids)):
        for image_id, question_keys in ItemImage.objects.filter(
            item__study=study, image_id__in=chunk
        ).values_list("image_id", "item__question_keys"):
            if not question_keys:
                keys[image_id] = None
            elif keys.get(image_id, set()) is not None:
                keys[image_id] = (keys.get(image_id) or set()) | {str(k) for k in question_keys}
    return {image_id: tuple(sorted(named)) if named else () for image_id, named in keys.items()}
