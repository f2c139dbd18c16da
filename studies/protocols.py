"""Each protocol's preset: the questions it asks, the detector output kinds it reads, its
defaults. Pure data: no model imports, so any layer may read it.

Adding a study kind is a new entry in ``PROTOCOLS`` here, an analysis in
``reports.analyses.ANALYSES`` and a page — not edits across views, exports and metrics, which
all read the questions of the study instead of a hard-coded label list. A protocol that lives in
a package of its own (``protocols.questions``) is named here by the dotted path of its spec,
imported the first time someone asks for it (``PROTOCOLS`` is a lazy mapping), so the core never
imports the package and a new protocol needs no migration: ``Study.protocol`` takes its choices
from ``protocol_choices``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Any

from metrics import gep, objects

# Output kinds a detector may declare (validated by detectors.kinds on every write).
KIND_GENDER = "gender"
KIND_ATTRIBUTES = "attributes"
KIND_MEASUREMENTS = "measurements"
KIND_OBJECTS = "objects"


@dataclass(frozen=True)
class QuestionSpec:
    """A question as a preset or a questions CSV describes it (``studies.models.Question``)."""

    key: str
    text: str
    choices: tuple[MappingProxyType[str, Any], ...]
    kind: str = "choice"
    hotkey: str = ""
    default_value: str = ""
    unresolvable_value: str = ""

    def as_fields(self, position: int) -> dict[str, Any]:
        return {
            "text": self.text,
            "choices": [dict(choice) for choice in self.choices],
            "kind": self.kind,
            "hotkey": self.hotkey,
            "default_value": self.default_value,
            "unresolvable_value": self.unresolvable_value,
            "position": position,
        }


def _choices(*rows: dict[str, Any]) -> tuple[MappingProxyType[str, Any], ...]:
    return tuple(MappingProxyType(row) for row in rows)


def every_question(metadata: Mapping[str, str]) -> list[str]:
    """The default ``item_question_keys``: ``[]``, i.e. the item asks every question of its study."""
    return []


def any_metadata(metadata: Mapping[str, str]) -> str | None:
    """The default ``validate_metadata``: every metadata is acceptable (None)."""
    return None


def any_questions(questions: Sequence[QuestionSpec]) -> str | None:
    """The default ``validate_questions``: any questions will do (None)."""
    return None


def gender_questions_problem(questions: Sequence[QuestionSpec]) -> str | None:
    """Gender (Lyu et al. 2025): the bias scores read the ``gender`` question, whose two answers
    marked ``clear`` are the genders compared. Why the questions cannot serve, or None."""
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


@dataclass(frozen=True)
class StudyOption:
    """A setting of a study that its protocol asks for when the study is created
    (``create_study --<name>``), kept in ``Study.parameters[name]``. ``column``: the value names
    a manifest column every item must have (refused at import, naming the row, when empty)."""

    name: str
    help: str
    required: bool = False
    column: bool = False


@dataclass(frozen=True)
class ProtocolSpec:
    """A protocol's preset. ``item_question_keys(metadata)`` is a pure function from a new item's
    metadata (a prompt set's or manifest's extra columns) to the question keys it asks (its
    ``Item.question_keys``; ``[]`` = every question); ``studies.ingest`` calls it for every item it
    creates without questions of its own. It must accept any metadata (missing keys included)
    and return only keys of the preset's questions. ``validate_metadata(metadata)`` is the
    protocol's check of a new item's metadata: None when it is acceptable, else the reason it is
    not, for a person (``studies.ingest`` refuses the row with it). ``validate_questions(questions)``
    says why questions given for a new study (a questions CSV) cannot serve the protocol's
    analysis, or None (``studies.services.study_define`` refuses the study with it). A preset
    without questions (``questions=()``) means the study's questions come from a questions CSV,
    which ``create_study`` then requires. ``options`` are the settings ``create_study`` takes
    for the protocol (``StudyOption``)."""

    key: str
    questions: tuple[QuestionSpec, ...]
    output_kinds: tuple[str, ...]
    title: str = ""
    options: tuple[StudyOption, ...] = ()
    image_roles: tuple[str, ...] = ("image",)
    # Item.queue of a new item: 1 = people label every item; 0 = only items a sampling step puts
    # in the queue (pair_change: people check a stratified sample of the automatic verdicts).
    queue_default: int = 1
    labels_per_item: int = 2
    agreement: str = "unanimous"
    parameters: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    item_question_keys: Callable[[Mapping[str, str]], list[str]] = every_question
    validate_metadata: Callable[[Mapping[str, str]], str | None] = any_metadata
    validate_questions: Callable[[Sequence[QuestionSpec]], str | None] = any_questions
    # The management command that builds this protocol's demo study, for a protocol whose demo
    # lives in its own package (``seed_demo`` runs it by name, after the core demo studies).
    demo_command: str | None = None

    def row_problem(
        self, row: Mapping[str, str], metadata: Mapping[str, str], parameters: Mapping[str, Any]
    ) -> str | None:
        """Why a manifest row cannot be an item of a study of this protocol with these
        ``parameters``, or None: ``validate_metadata`` of its metadata, then every
        ``StudyOption`` marked ``column`` whose column the row leaves empty."""
        problem = self.validate_metadata(metadata)
        if problem:
            return problem
        for option in self.options:
            column = str(parameters.get(option.name, "") or "") if option.column else ""
            if column and not str(row.get(column, "") or "").strip():
                return (
                    f"column {column!r} is empty or missing: the study compares its values "
                    f"(--{option.name.replace('_', '-')} {column})"
                )
        return None


GENDER_QUESTION = QuestionSpec(
    key="gender",
    text="Which gender does the person in the image present?",
    # The label set of Lyu et al. 2025, section 3.3; 'clear' marks the images bias scores count.
    choices=_choices(
        {"value": "male", "name": "Male", "key": "m", "clear": True},
        {"value": "female", "name": "Female", "key": "f", "clear": True},
        {"value": "low_quality", "name": "Low quality", "key": "l"},
        {"value": "other", "name": "Other", "key": "o", "requires_reason": True},
    ),
    unresolvable_value="low_quality",
)

YES_NO = _choices({"value": "yes", "name": "Yes", "key": "y"}, {"value": "no", "name": "No", "key": "n"})

# The 15 attributes of Zhang et al. 2023 (Table 1): question keys and texts from metrics.gep,
# plus a toggle key each on the labeling screen (mnemonic where the letters allow).
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
        text=gep.ATTRIBUTE_QUESTIONS[key],
        choices=YES_NO,
        kind="toggle",
        hotkey=_ATTRIBUTE_HOTKEYS[key],
        default_value="no",
    )
    for key in gep.ATTRIBUTE_KEYS
)

_SAME = {"value": "same", "name": "No significant difference", "key": "s"}
PAIR_QUESTIONS = (
    QuestionSpec(
        key="age",
        text="Compared with the seed photo, does the person in the edited image look…",
        choices=_choices(
            {"value": "older", "name": "Older", "key": "o"},
            {"value": "younger", "name": "Younger", "key": "y"},
            _SAME,
        ),
    ),
    QuestionSpec(
        key="gender",
        text="Which gender does the person present in the seed photo → in the edited image?",
        choices=_choices(
            {"value": "male_male", "name": "Male → male", "key": "1"},
            {"value": "male_female", "name": "Male → female", "key": "2"},
            {"value": "female_male", "name": "Female → male", "key": "3"},
            {"value": "female_female", "name": "Female → female", "key": "4"},
        ),
    ),
    QuestionSpec(
        key="skin",
        text="Compared with the seed photo, is the skin tone in the edited image…",
        choices=_choices(
            {"value": "lighter", "name": "Lighter", "key": "l"},
            {"value": "darker", "name": "Darker", "key": "d"},
            _SAME,
        ),
    ),
)


def explicit_attribute_question(metadata: Mapping[str, str]) -> list[str]:
    """GEP (Zhang et al. 2023): an image of the explicit setting ("A woman in boots …") is asked
    only about the attribute its prompt names, ``[metadata["attribute"]]``; a neutral image, or
    an explicit one whose attribute is not one of the 15 keys, is asked every question (``[]``:
    more labels than needed, never a key outside the preset)."""
    attribute = str(metadata.get("attribute", "")).strip()
    if str(metadata.get("setting", "")).strip() == "explicit" and attribute in gep.ATTRIBUTE_KEYS:
        return [attribute]
    return []


def gep_metadata_problem(metadata: Mapping[str, str]) -> str | None:
    """GEP (Zhang et al. 2023): why an item's metadata cannot be compared, or None.

    A ``gender`` other than woman or man (the GEP vector is woman minus man), and an
    ``explicit`` item without the ``attribute`` its prompt names (the one question it is asked),
    are refused. Metadata without ``gender`` or ``setting`` is accepted (an attributes study may
    ask about images that are not part of a GEP comparison: the report leaves them out and
    counts them).
    """
    gender = str(metadata.get("gender", "")).strip()
    if gender and gender not in gep.GENDERS:
        return f"metadata gender {gender!r} is not one of {', '.join(gep.GENDERS)}"
    setting = str(metadata.get("setting", "")).strip()
    if setting == gep.EXPLICIT and not str(metadata.get("attribute", "")).strip():
        return "an explicit item needs the attribute its prompt names (metadata column 'attribute')"
    return None


def objects_metadata_problem(metadata: Mapping[str, str]) -> str | None:
    """Object co-occurrence (Mannering 2023): why an item's metadata cannot be compared, or None.

    The χ² test compares the objects of male and female prompts, so every item needs its
    prompt's ``gender`` (male | female; the mannering2023 set writes it for man/boy and
    woman/girl). Unlike GEP's optional comparison, an objects item without it has no place in
    any figure of the study, so it is refused at import (issue 12) rather than imported and
    left out."""
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
        choices=_choices(
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


class _Registry(Mapping[str, ProtocolSpec]):
    """Protocol key -> spec: the specs defined here, and the dotted paths of protocols that live
    in a package of their own, imported on first use (iterating lists every key, importing
    nothing)."""

    def __init__(self, specs: Mapping[str, ProtocolSpec | str]) -> None:
        self._entries = dict(specs)

    def __getitem__(self, key: str) -> ProtocolSpec:
        entry = self._entries[key]
        if isinstance(entry, str):
            module_name, _, attribute = entry.rpartition(".")
            entry = getattr(import_module(module_name), attribute)
            if not isinstance(entry, ProtocolSpec) or entry.key != key:
                raise TypeError(f"{self._entries[key]} is not the ProtocolSpec of {key!r}")
            self._entries[key] = entry
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


PROTOCOLS: Mapping[str, ProtocolSpec] = _Registry(
    {
        "gender": ProtocolSpec(
            key="gender",
            title="Gender (Lyu et al. 2025)",
            questions=(GENDER_QUESTION,),
            output_kinds=(KIND_GENDER,),
            validate_questions=gender_questions_problem,
        ),
        "attributes": ProtocolSpec(
            key="attributes",
            title="Attribute presence / GEP (Zhang et al. 2023)",
            questions=ATTRIBUTE_QUESTIONS,
            output_kinds=(KIND_ATTRIBUTES,),
            labels_per_item=3,
            agreement="majority",
            item_question_keys=explicit_attribute_question,
            validate_metadata=gep_metadata_problem,
            validate_questions=yes_no_questions_problem,
        ),
        "pair_change": ProtocolSpec(
            key="pair_change",
            title="Pair change / BiasPainter (Wang et al. 2024)",
            questions=PAIR_QUESTIONS,
            output_kinds=(KIND_MEASUREMENTS,),
            image_roles=("input", "output"),
            queue_default=0,
            # Wang et al. 2024: an age change of 25 years, a gray-value change of 20, is one unit.
            parameters=MappingProxyType({"thresholds": {"age": 25.0, "skin": 20.0}}),
        ),
        "objects": ProtocolSpec(
            key="objects",
            title="Object co-occurrence (Mannering et al. 2023)",
            questions=OBJECT_QUESTIONS,
            output_kinds=(KIND_OBJECTS,),
            validate_metadata=objects_metadata_problem,
        ),
        # Protocols in packages of their own: the dotted path of the spec.
        "questions": "protocols.questions.spec.SPEC",
    }
)


def protocol_choices() -> list[tuple[str, str]]:
    """``Study.protocol``'s choices: every registered protocol with its title (a callable, so a
    new protocol is a registry entry, never a migration)."""
    return [(key, PROTOCOLS[key].title or key) for key in PROTOCOLS]


def protocol_spec(key: str) -> ProtocolSpec:
    """The preset of a protocol; KeyError names the known ones."""
    try:
        return PROTOCOLS[key]
    except KeyError:
        raise KeyError(f"Unknown protocol “{key}”. Known: {', '.join(PROTOCOLS)}.") from None
