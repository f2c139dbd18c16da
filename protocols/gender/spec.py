"""The ``gender`` protocol's spec (Lyu et al. 2025): one question, outputs of kind ``gender``."""

from __future__ import annotations

from collections.abc import Sequence

from detectors.kinds import KIND_GENDER
from studies.protocols import ProtocolSpec, QuestionSpec, choice_rows

KEY = "gender"

GENDER_QUESTION = QuestionSpec(
    key="gender",
    text="Which gender does the person in the image present?",
    # The label set of Lyu et al. 2025, section 3.3; 'clear' marks the images bias scores count.
    choices=choice_rows(
        {"value": "male", "name": "Male", "key": "m", "clear": True},
        {"value": "female", "name": "Female", "key": "f", "clear": True},
        {"value": "low_quality", "name": "Low quality", "key": "l"},
        {"value": "other", "name": "Other", "key": "o", "requires_reason": True},
    ),
    unresolvable_value="low_quality",
)


def gender_questions_problem(questions: Sequence[QuestionSpec]) -> str | None:
    """Why the questions lack a ``gender`` question with exactly two clear answers, or None."""
    gender = next((q for q in questions if q.key == "gender"), None)
    if gender is None:
        return (
            "a gender study needs a question with key 'gender' (its bias scores read it); "
            f"the questions are {', '.join(q.key for q in questions) or 'none'}"
        )
    clear = [str(c["value"]) for c in gender.choices if c.get("clear")]
    if len(clear) != 2:
        return (
            f"the 'gender' question must mark exactly two choices as clear (the two genders the bias "
            f"scores compare), not {len(clear)} ({', '.join(clear) or 'none'}): list them in the 'clear' column"
        )
    return None


SPEC = ProtocolSpec(
    key=KEY,
    title="Gender (Lyu et al. 2025)",
    questions=(GENDER_QUESTION,),
    output_kinds=(KIND_GENDER,),
    validate_questions=gender_questions_problem,
    demo="protocols.gender.demo.DEMO",
    analysis="protocols.gender.analysis.GenderAnalysis",
    estimates="protocols.gender.estimates",
    urls="protocols.gender.urls",
)
