"""The ``objects`` protocol's spec (object co-occurrence, Mannering et al. 2023): people check a
detector's boxes (``prepare_box_check``) and name missed classes; detectors answer with outputs
of kind ``objects``. Pure data: no model imports."""

from __future__ import annotations

from collections.abc import Mapping

from detectors.kinds import KIND_OBJECTS
from metrics import objects
from studies.protocols import ProtocolSpec, QuestionSpec, choice_rows

KEY = "objects"


def objects_metadata_problem(metadata: Mapping[str, str]) -> str | None:
    """Why an item's metadata cannot be compared, or None: the χ² test compares male and female
    prompts, so an item without its prompt's ``gender`` is refused at import."""
    gender = str(metadata.get("gender", "")).strip()
    if not gender:
        return f"metadata gender is missing: an objects item needs its prompt's gender ({' or '.join(objects.GENDERS)})"
    if gender not in objects.GENDERS:
        return f"metadata gender {gender!r} is not one of {', '.join(objects.GENDERS)}"
    return None


OBJECT_QUESTIONS = (
    QuestionSpec(
        key="boxes",
        text="Is the highlighted object really there?",
        choices=choice_rows(
            {"value": "yes", "name": "Yes, it is there", "key": "y"},
            {"value": "no", "name": "No, a false detection", "key": "n"},
        ),
        kind="boxes",
    ),
    QuestionSpec(
        key="missed",
        text="Any of these objects missed by the detector? (class names, comma-separated)",
        choices=(),
        kind="classes",
    ),
)


SPEC = ProtocolSpec(
    key=KEY,
    title="Object co-occurrence (Mannering et al. 2023)",
    questions=OBJECT_QUESTIONS,
    output_kinds=(KIND_OBJECTS,),
    validate_metadata=objects_metadata_problem,
    demo="protocols.objects.demo.DEMO",
    analysis="protocols.objects.analysis.ObjectsAnalysis",
    estimates="protocols.objects.estimates",
    urls="protocols.objects.urls",
)
