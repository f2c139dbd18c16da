"""Question kinds: how a person answers a question and how ``Label.value`` stores the answer,
one ``QuestionKind`` unit each, registered once (docs/how-to/add-question-kind.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from studies.errors import DomainError


class QuestionLike(Protocol):
    """What a kind reads of a question (``studies.models.Question``; no model import here, as
    the model's field validator reads this registry)."""

    key: str
    text: str
    kind: str
    hotkey: str
    default_value: str
    choices: Any

    @property
    def values(self) -> list[str]: ...

    def choice(self, value: str) -> dict[str, Any] | None: ...


class ItemLike(Protocol):
    """What a kind reads of an item (``studies.models.Item``)."""

    key: str
    metadata: Any


#: The longest kind name ``Question.kind`` holds.
NAME_MAX = 10


class AnswerInvalid(DomainError):
    """An answer a question's kind does not take; the message is meant for the person."""


class QuestionKind:
    """One way of answering. Subclass, set the class attributes, override what differs, and
    register an instance. Every method is pure (no queries): it runs on each key press."""

    name = ""
    #: One line for people: how it is answered and what its value is.
    label = ""
    #: The partial drawn in the question's fieldset on a many-question screen (context ``q``).
    template = "annotate/kinds/choice.html"
    #: Static paths of its script and stylesheet, loaded on the labeling page of a study asking it.
    script = ""
    stylesheet = ""
    #: A question of this kind needs at least two choices.
    needs_choices = True
    #: An empty answer is an answer (a list with nothing in it).
    empty_allowed = False
    #: Alone on a screen, answered by one key press (the labeling screen's single layout).
    one_key = False
    #: ``validate`` reads the item, so one answer's check is not shared between items.
    reads_item = False
    #: Answered as typed text where its partial is not drawn (the dispute page).
    text_answer = False

    def validate(self, question: QuestionLike, value: str, item: ItemLike | None = None) -> str:
        """The stored form of ``value`` (already stripped, NUL-free); AnswerInvalid when it is not
        an answer. The default: one of the question's choice values."""
        if question.choice(value) is None:
            raise AnswerInvalid(
                f"“{value}” is not a label of the question “{question.key}”. "
                f"Valid labels: {', '.join(question.values)}."
            )
        return value

    def stored_problem(self, question: QuestionLike, value: str) -> str | None:
        """Why ``value`` is not a stored answer (not exactly as ``validate`` writes it), or None."""
        try:
            if self.validate(question, value) == value:
                return None
        except AnswerInvalid:
            pass
        listed = f" ({', '.join(question.values)})" if question.values else ""
        return f"{value!r} is not an answer to the question '{question.key}'{listed}"

    def posted(self, question: QuestionLike, post: Mapping[str, Any], field: str) -> tuple[str | None, str]:
        """The answer joined from the kind's own form fields (None: ``field`` is read as posted),
        and an error for the person ("" when none)."""
        return None, ""

    def context(
        self, question: QuestionLike, chosen: str, field: str, item: ItemLike | None
    ) -> dict[str, Any]:
        """What the partial needs beyond the question's common row."""
        return {}

    def overlay(self, question: QuestionLike, item: ItemLike, image: Any) -> dict[str, Any] | None:
        """What the kind draws over the item's image (``template`` names the partial), or None."""
        return None

    def keys(self, question: QuestionLike, *, alone: bool) -> list[dict[str, str]]:
        """The question's keys for the guidelines box (``alone``: the single layout)."""
        keys = []
        for choice in question.choices:
            if choice.get("key"):
                what = choice.get("name", choice["value"])
                if choice.get("requires_reason"):
                    what += " (asks for a reason)"
                keys.append({"key": choice["key"], "what": what if alone else f"{question.key}: {what}"})
        return keys


class ChoiceKind(QuestionKind):
    name = "choice"
    label = "One of the choices (a key each)"
    one_key = True


class ToggleKind(QuestionKind):
    name = "toggle"
    label = "Yes/no toggled by the question's key (many questions on one screen)"

    def keys(self, question: QuestionLike, *, alone: bool) -> list[dict[str, str]]:
        if not question.hotkey:
            return []
        names = " / ".join(c.get("name", c["value"]) for c in question.choices)
        return [{"key": question.hotkey, "what": f"{question.text} ({names}; switches)"}]


CHOICE = ChoiceKind()
TOGGLE = ToggleKind()
_CORE: tuple[QuestionKind, ...] = (CHOICE, TOGGLE)

# --- The registry -----------------------------------------------------------------------------

_runtime: dict[str, QuestionKind] = {}
_known: dict[str, QuestionKind] | None = None


def kind_registrations() -> list[tuple[str, str | QuestionKind]]:
    """(who registered it, its dotted path or the kind) in order: the core, installed apps'
    ``question_kinds`` in ``INSTALLED_APPS`` order, then ``register_kind``."""
    found: list[tuple[str, str | QuestionKind]] = [("studies", kind) for kind in _CORE]
    for config in apps.get_app_configs():
        found.extend((config.label, path) for path in getattr(config, "question_kinds", ()))
    found.extend(("register_kind", kind) for kind in _runtime.values())
    return found


def question_kinds() -> Mapping[str, QuestionKind]:
    """Name -> kind, every registered kind (read once, again after a registration changes)."""
    global _known
    if _known is None:
        known: dict[str, QuestionKind] = {}
        for _, entry in kind_registrations():
            kind = import_string(entry) if isinstance(entry, str) else entry
            known.setdefault(kind.name, kind)
        _known = known
    return _known


def kind_of(question: QuestionLike) -> QuestionKind:
    """The unit of ``question.kind``; LookupError names the registered kinds when none is."""
    known = question_kinds()
    try:
        return known[question.kind]
    except KeyError:
        raise LookupError(
            f"The question {question.key!r} is of kind {question.kind!r}, which no installed app "
            f"registers (kinds: {', '.join(known)})."
        ) from None


def kind_problem(name: str) -> str | None:
    """Why ``name`` is no registered kind (naming those there are), or None."""
    known = question_kinds()
    return None if name in known else f"kind {name!r} is not one of {', '.join(known)}"


def validate_kind(value: str) -> None:
    """``Question.kind``'s validator: a registered kind."""
    problem = kind_problem(value)
    if problem:
        raise ValidationError(problem[0].upper() + problem[1:] + ".", code="unknown_kind")


def _changed(**kwargs: Any) -> None:
    global _known
    if kwargs.get("setting", "INSTALLED_APPS") == "INSTALLED_APPS":
        _known = None


def register_kind(kind: QuestionKind) -> None:
    """Register a kind at run time (a plugin without an app, or a test); ValueError when taken."""
    if kind.name in question_kinds():
        raise ValueError(f"A question kind {kind.name!r} is registered already.")
    _runtime[kind.name] = kind
    _changed()


def unregister_kind(name: str) -> None:
    """Take out a kind ``register_kind`` added (KeyError for any other)."""
    del _runtime[name]
    _changed()


@contextmanager
def kind_registered(kind: QuestionKind) -> Iterator[QuestionKind]:
    """``register_kind(kind)`` for the ``with`` block, unregistered after."""
    register_kind(kind)
    try:
        yield kind
    finally:
        unregister_kind(kind.name)


setting_changed.connect(_changed, dispatch_uid="studies.kinds.installed_apps")
