"""The ``questions`` protocol's spec: single-choice questions from a CSV, groups from one
manifest column (``parameters["compare"]``), detector outputs of kind ``answers``."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from studies.protocols import ProtocolSpec, QuestionSpec, StudyOption

KEY = "questions"
#: The detector output kind a questions study reads (``protocols.questions.kinds``).
KIND_ANSWERS = "answers"
#: ``Study.parameters`` key of the manifest column whose values are the groups compared.
COMPARE = "compare"


def single_choice_problem(questions: Sequence[QuestionSpec]) -> str | None:
    """Why the questions cannot serve a questions study, or None: each must be single-choice
    (kind ``choice``) with at least two answers."""
    for question in questions:
        if question.kind != "choice":
            return f"question '{question.key}' is of kind {question.kind}; every question must be single-choice (kind choice)"
        if len(question.choices) < 2:
            return f"question '{question.key}' needs at least two answers"
    return None


SPEC = ProtocolSpec(
    key=KEY,
    title="Questions from a CSV, answers compared across groups",
    questions=(),  # from the study's questions CSV, which create_study then requires
    output_kinds=(KIND_ANSWERS,),
    # The kind is the protocol's own: ``detectors.kinds`` validates and checks it with these.
    kind_validators=MappingProxyType({KIND_ANSWERS: "protocols.questions.kinds.validate_answers"}),
    kind_checks=MappingProxyType({KIND_ANSWERS: "protocols.questions.kinds.answers_fit_questions"}),
    options=(
        StudyOption(
            name=COMPARE,
            help="Questions studies: the manifest column whose values are the groups compared "
            "(e.g. word, group, skin); every imported row must have it.",
            required=True,
            column=True,
        ),
    ),
    validate_questions=single_choice_problem,
    demo="protocols.questions.demo.DEMO",
    analysis="protocols.questions.analysis.QuestionsAnalysis",
    estimates="protocols.questions.estimates",
    urls="protocols.questions.urls",
)
