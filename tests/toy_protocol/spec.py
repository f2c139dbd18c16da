"""The ``toy`` protocol's spec: one single-choice question, ``mood``, and its own detector
output kind ``mood`` (``{"mood": "happy" | "sad" | "neutral"}``). Pure data: no model imports."""

from __future__ import annotations

from types import MappingProxyType

from studies.protocols import ProtocolSpec, QuestionSpec, choice_rows

KEY = "toy"
KIND_MOOD = "mood"
MOODS = ("happy", "sad", "neutral")

MOOD_QUESTION = QuestionSpec(
    key="mood",
    text="What mood does the person show?",
    choices=choice_rows(
        {"value": "happy", "name": "Happy", "key": "h"},
        {"value": "sad", "name": "Sad", "key": "s"},
        {"value": "neutral", "name": "Neutral", "key": "n"},
    ),
)

SPEC = ProtocolSpec(
    key=KEY,
    title="Toy: moods counted per model",
    questions=(MOOD_QUESTION,),
    output_kinds=(KIND_MOOD,),
    labels_per_item=2,
    kind_validators=MappingProxyType({KIND_MOOD: "tests.toy_protocol.kinds.validate_mood"}),
    kind_checks=MappingProxyType({KIND_MOOD: "tests.toy_protocol.kinds.mood_fits_questions"}),
    analysis="tests.toy_protocol.analysis.ToyAnalysis",
    urls="tests.toy_protocol.urls",
)
