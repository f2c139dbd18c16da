"""The registry of protocols and the types their specs are made of; no model imports, so any
layer may read it. How to add one: docs/how-to/add-protocol.md."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from django.apps import apps
from django.core.signals import setting_changed
from django.dispatch import Signal
from django.utils.module_loading import import_string


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
        """The ``Question`` fields besides its study and key, at ``position`` on the screen."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "key"}
        return values | {"choices": [dict(choice) for choice in self.choices], "position": position}


def choice_rows(*rows: dict[str, Any]) -> tuple[MappingProxyType[str, Any], ...]:
    """Choice rows (``{"value", "name", "key", …}``) as a question preset keeps them (read-only)."""
    return tuple(MappingProxyType(row) for row in rows)


@dataclass(frozen=True)
class StudyOption:
    """A study setting its protocol asks for at creation (``create_study --<name>``), kept in
    ``Study.parameters[name]``; ``column``: it names a manifest column every item must fill."""

    name: str
    help: str
    required: bool = False
    column: bool = False

    @property
    def metavar(self) -> str:
        """What the option's value stands for, in its help and errors: COLUMN or VALUE."""
        return "COLUMN" if self.column else "VALUE"


@dataclass(frozen=True)
class ProtocolSpec:
    """A protocol's preset: questions, image roles, options, dotted paths of its analysis, pages, demo
    and output kinds, and pure checks of metadata and questions (docs/how-to/add-protocol.md)."""

    key: str
    questions: tuple[QuestionSpec, ...]
    output_kinds: tuple[str, ...]
    title: str = ""
    options: tuple[StudyOption, ...] = ()
    image_roles: tuple[str, ...] = ("image",)
    # Item.queue of a new item: 1 = people label every item; 0 = only items a sampling step queues.
    queue_default: int = 1
    labels_per_item: int = 2
    agreement: str = "unanimous"
    parameters: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # The question keys an item asks given its metadata ([]: every question of its study), and why
    # the metadata or the questions do not fit the protocol (None: they do). By default: all, all.
    item_question_keys: Callable[[Mapping[str, str]], list[str]] = lambda metadata: []
    validate_metadata: Callable[[Mapping[str, str]], str | None] = lambda metadata: None
    validate_questions: Callable[[Sequence[QuestionSpec]], str | None] = lambda questions: None
    # Dotted path of the protocol's demo (``annotate.demo.seeding.ProtocolDemo``); "" = none.
    demo: str = ""
    # Dotted path of its ``reports.analyses.Analysis`` class ("" = no report yet).
    analysis: str = ""
    # Dotted path of its report pages' URLconf, mounted under ``/reports/`` ("" = none).
    urls: str = ""
    # Dotted path of the module whose ``ESTIMAND`` is its few-label estimate ("" = none).
    estimates: str = ""
    kind_validators: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    kind_checks: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def paired(self) -> bool:
        """Items are several images in roles (a seed photo and its edit), not one image."""
        return len(self.image_roles) > 1

    def row_problem(
        self, row: Mapping[str, str], metadata: Mapping[str, str], parameters: Mapping[str, Any]
    ) -> str | None:
        """Why a manifest row cannot be an item of this protocol with these ``parameters``, or
        None."""
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


# Sent when the registered protocols change (register, unregister, ``override_settings``).
protocols_changed = Signal()


_runtime: dict[str, str | ProtocolSpec] = {}
_imported: dict[str, ProtocolSpec] = {}


def protocol_registrations() -> dict[str, str | ProtocolSpec]:
    """Key -> what registers it, importing nothing: installed apps' ``protocol_spec`` (a dotted
    path), then run-time registrations (a dotted path or the spec itself)."""
    found: dict[str, str | ProtocolSpec] = {
        config.label: config.protocol_spec  # type: ignore[attr-defined]
        for config in apps.get_app_configs()
        if getattr(config, "protocol_spec", "")
    }
    found.update(_runtime)
    return found


class _Registry(Mapping[str, ProtocolSpec]):
    """Protocol key -> spec, as ``protocol_registrations`` lists them; a spec is imported the
    first time it is read."""

    def __getitem__(self, key: str) -> ProtocolSpec:
        entry = protocol_registrations()[key]
        if isinstance(entry, ProtocolSpec):
            return entry
        spec = _imported.get(entry)
        if spec is None:
            spec = import_string(entry)
            if not isinstance(spec, ProtocolSpec) or spec.key != key:
                raise TypeError(f"{entry} is not the ProtocolSpec of {key!r}")
            _imported[entry] = spec
        return spec

    def __iter__(self) -> Iterator[str]:
        return iter(protocol_registrations())

    def __len__(self) -> int:
        return len(protocol_registrations())


PROTOCOLS: Mapping[str, ProtocolSpec] = _Registry()


def register_protocol(spec: str | ProtocolSpec) -> str:
    """Register a protocol at run time by its spec (or dotted path) and return its key;
    ValueError when the key is taken."""
    resolved = import_string(spec) if isinstance(spec, str) else spec
    if not isinstance(resolved, ProtocolSpec):
        raise TypeError(f"{spec} is not a ProtocolSpec")
    if resolved.key in protocol_registrations():
        raise ValueError(f"A protocol {resolved.key!r} is registered already.")
    _runtime[resolved.key] = spec
    protocols_changed.send(sender=_Registry)
    return resolved.key


def unregister_protocol(key: str) -> None:
    """Take out a protocol ``register_protocol`` added (KeyError for any other)."""
    if key not in _runtime:
        raise KeyError(f"Protocol {key!r} was not registered at run time (an installed app's stays).")
    del _runtime[key]
    protocols_changed.send(sender=_Registry)


@contextmanager
def protocol_registered(spec: str | ProtocolSpec) -> Iterator[str]:
    """``register_protocol(spec)`` for the ``with`` block (yielding the key), unregistered after."""
    key = register_protocol(spec)
    try:
        yield key
    finally:
        unregister_protocol(key)


def _installed_apps_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "INSTALLED_APPS":
        protocols_changed.send(sender=_Registry)


setting_changed.connect(_installed_apps_changed, dispatch_uid="studies.protocols.installed_apps")


def protocol_choices() -> list[tuple[str, str]]:
    """``Study.protocol``'s choices: every registered protocol with its title."""
    return [(key, PROTOCOLS[key].title or key) for key in PROTOCOLS]


def protocol_spec(key: str) -> ProtocolSpec:
    """The preset of a protocol; KeyError names the known ones."""
    try:
        return PROTOCOLS[key]
    except KeyError:
        raise KeyError(f"Unknown protocol “{key}”. Known: {', '.join(PROTOCOLS)}.") from None


class SpecPaths(MutableMapping[str, str]):
    """Protocol key -> one dotted-path field of its spec (``analysis``, ``estimates``), re-read
    after ``protocols_changed``; writable for tests."""

    def __init__(self, field_name: str) -> None:
        self._field = field_name
        self._paths: dict[str, str] | None = None
        protocols_changed.connect(
            self._forget, weak=False, dispatch_uid=f"studies.protocols.SpecPaths.{field_name}"
        )

    def _forget(self, **kwargs: Any) -> None:
        self._paths = None

    def _loaded(self) -> dict[str, str]:
        if self._paths is None:
            paths = {key: getattr(PROTOCOLS[key], self._field) for key in PROTOCOLS}
            self._paths = {key: path for key, path in paths.items() if path}
        return self._paths

    def __getitem__(self, key: str) -> str:
        return self._loaded()[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._loaded()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._loaded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())
