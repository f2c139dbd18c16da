"""The ``attributes`` protocol's spec (GEP, Zhang et al. 2023): 15 attributes asked yes or no."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from detectors.kinds import KIND_ATTRIBUTES
from metrics import gep_design
from studies.protocols import ProtocolSpec, QuestionSpec, choice_rows

KEY = "attributes"

YES_NO = choice_rows({"value": "yes", "name": "Yes", "key": "y"}, {"value": "no", "name": "No", "key": "n"})

# The 15 attributes of Zhang et al. 2023 (Table 1), each with a mnemonic toggle key.
_ATTRIBUTE_HOTKEYS = {
    "boots": "b",
    "slippers": "p",
    "jeans": "j",
    "shorts": "o",
    "slacks": "l",
    "dress": "d",
    "skirt": "k",
    "suit": "s",
    "shirt": "h",
    "uniform": "u",
    "jacket": "a",
    "hat": "t",
    "tie": "i",
    "mask": "m",
    "gloves": "g",
}

ATTRIBUTE_QUESTIONS = tuple(
    QuestionSpec(
        key=key,
        text=gep_design.ATTRIBUTE_QUESTIONS[key],
        choices=YES_NO,
        kind="toggle",
        hotkey=_ATTRIBUTE_HOTKEYS[key],
        default_value="no",
    )
    for key in gep_design.ATTRIBUTE_KEYS
)


def explicit_attribute_question(metadata: Mapping[str, str]) -> list[str]:
    """The question keys an item is asked: only its ``attribute`` on an explicit item, else all
    (``[]``)."""
    attribute = str(metadata.get("attribute", "")).strip()
    if str(metadata.get("setting", "")).strip() == "explicit" and attribute in gep_design.ATTRIBUTE_KEYS:
        return [attribute]
    return []


def gep_metadata_problem(metadata: Mapping[str, str]) -> str | None:
    """Why an item's metadata cannot enter a GEP comparison, or None."""
    gender = str(metadata.get("gender", "")).strip()
    if gender and gender not in gep_design.GENDERS:
        return f"metadata gender {gender!r} is not one of {', '.join(gep_design.GENDERS)}"
    setting = str(metadata.get("setting", "")).strip()
    if setting == gep_design.EXPLICIT and not str(metadata.get("attribute", "")).strip():
        return "an explicit item needs the attribute its prompt names (metadata column 'attribute')"
    return None


def yes_no_questions_problem(questions: Sequence[QuestionSpec]) -> str | None:
    """Attributes (GEP, Zhang et al. 2023): every question is an attribute answered yes or no."""
    for question in questions:
        values = {str(c["value"]) for c in question.choices}
        if values != {"yes", "no"}:
            return (
                f"question '{question.key}' has the answers {', '.join(sorted(values)) or 'none'}; "
                "an attributes study asks yes/no questions only (the GEP report compares them)"
            )
    return None


SPEC = ProtocolSpec(
    key=KEY,
    title="Attribute presence / GEP (Zhang et al. 2023)",
    questions=ATTRIBUTE_QUESTIONS,
    output_kinds=(KIND_ATTRIBUTES,),
    labels_per_item=3,
    agreement="majority",
    item_question_keys=explicit_attribute_question,
    validate_metadata=gep_metadata_problem,
    validate_questions=yes_no_questions_problem,
    demo="protocols.attributes.demo.DEMO",
    analysis="protocols.attributes.analysis.AttributesAnalysis",
    estimates="protocols.attributes.estimates",
    urls="protocols.attributes.urls",
)
