"""The registry of protocols and the types their specs are made of. Pure data: no model
imports, so any layer may read it.

A protocol (a study kind: gender, attributes, pair change, objects, questions) is one package of
its own under ``protocols/`` holding its spec, analysis, pages, commands and demo. ``PROTOCOLS``
names each by the dotted path of its spec (a ``ProtocolSpec``), imported the first time someone
asks for it (a lazy mapping), so the core never imports a protocol package and a new protocol
needs no migration: ``Study.protocol`` takes its choices from ``protocol_choices``. Where the core
behaves differently for a protocol it asks the spec (its fields and methods), never the name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Any

#: The protocol of a study created without naming one (``create_study``, ``study_create``).
DEFAULT_PROTOCOL = "gender"


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


def choice_rows(*rows: dict[str, Any]) -> tuple[MappingProxyType[str, Any], ...]:
    """Choice rows (``{"value", "name", "key", …}``) as a question preset keeps them (read-only)."""
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
    # The dotted path of the protocol's demo study (an ``annotate.demo.seeding.ProtocolDemo``),
    # which ``seed_demo`` builds ("" = none).
    demo: str = ""
    # The dotted path of the protocol's ``reports.analyses.Analysis`` class ("" = no report yet):
    # ``reports.analyses.ANALYSES`` is read from here.
    analysis: str = ""
    # The dotted path of the URLconf of the protocol's own report pages, mounted under
    # ``/reports/`` in the ``reports`` namespace ("" = none).
    urls: str = ""

    @property
    def paired(self) -> bool:
        """An item is several images in roles (a seed photo and its edit), not one image: the
        manifest names each row's item and role, and exports carry one column per role."""
        return len(self.image_roles) > 1

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
        # Protocol key -> the dotted path of its spec, in the order studies list them.
        "gender": "protocols.gender.spec.SPEC",
        "attributes": "protocols.attributes.spec.SPEC",
        "pair_change": "protocols.pair_change.spec.SPEC",
        "objects": "protocols.objects.spec.SPEC",
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
