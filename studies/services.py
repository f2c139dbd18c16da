"""Writes of the core: defining a study and its questions, adding its annotators."""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import RestrictedError

from studies import permissions
from studies.errors import AnnotatorsRefused, ImportRejected, StaffRefused, StudyConflict
from studies.kinds import CHOICE, kind_problem, question_kinds
from studies.models import AgreementRule, GoldAnswer, Item, ItemImage, Question, Study
from studies.protocols import PROTOCOLS, ProtocolSpec, QuestionSpec, protocol_spec

QUESTION_COLUMNS = ("key", "text", "choices")
#: The manifest columns the image import reads (any other is kept in the item's metadata).
MANIFEST_KNOWN_COLUMNS = (
    "image",
    "item",
    "role",
    "t2i_model",
    "prompt",
    "category",
    "word",
    "seed",
    "index",
    "params",
    "questions",
)

# Manifest columns read into an item's file, key, role, params and questions: none kept to group by.
MANIFEST_COLUMNS_NOT_KEPT = frozenset({"image", "item", "role", "params", "questions"})
# Keys the labeling screen keeps for itself (static/annotate/keys.js): no answer may use them.
SCREEN_KEYS = {"z": "Back", "/": "missed-objects"}
_QUESTION_KEY_RE = re.compile(r"^[-a-zA-Z0-9_]{1,50}$")
# Field sizes of studies.models.Question (and of a label's value): longer is a row error.
_QUESTION_TEXT_MAX = 500
_ANSWER_VALUE_MAX = 50
# What one labeling screen can show and answer from the keyboard (26 letters for keys).
_CHOICE_NAME_MAX = 200
_CHOICES_MAX = 26
_QUESTIONS_MAX = 50


def _unique_name(base: str, *, exclude: Study | None = None) -> str:
    """``base``, or ``base (2)``, ``base (3)``… if another study already has that name."""
    others = Study.objects.exclude(pk=exclude.pk) if exclude is not None else Study.objects.all()
    title, n = base, 2
    while others.filter(name=title).exists():
        title, n = f"{base} ({n})", n + 1
    return title


@transaction.atomic
def study_create(
    *,
    slug: str,
    protocol: str,
    name: str | None = None,
    labels_per_item: int | None = None,
    agreement: str | None = None,
    questions: list[QuestionSpec] | None = None,
    parameters: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Study:
    """A new study of ``protocol`` with its questions and parameters (the preset's unless given),
    and any other ``fields`` of the study."""
    spec = protocol_spec(protocol)
    study = Study.objects.create(
        slug=slug,
        name=_unique_name(name or slug.replace("-", " ").replace("_", " ").capitalize()),
        protocol=protocol,
        labels_per_item=labels_per_item or spec.labels_per_item,
        agreement=agreement or spec.agreement,
        parameters=dict(spec.parameters) | dict(parameters or {}),
        claim_timeout_seconds=settings.BIASLAB_CLAIM_TIMEOUT_SECONDS,
        **fields,
    )
    _questions_create(study, questions or spec.questions)
    return study


def _questions_create(study: Study, questions: Iterable[QuestionSpec]) -> None:
    for position, question in enumerate(questions):
        Question.objects.create(study=study, key=question.key, **question.as_fields(position))


@dataclass(frozen=True)
class StudyDefinition:
    """What ``study_define`` did: the study, whether it is new, and which fields it changed."""

    study: Study
    created: bool
    changed: list[str]


def _question_fields(questions: Iterable[Question | QuestionSpec]) -> list[tuple[Any, ...]]:
    """What each question asks, alike for stored questions and specs."""
    return [
        (q.key, q.text, [dict(c) for c in q.choices], q.kind, q.hotkey, q.default_value, q.unresolvable_value)
        for q in questions
    ]


@transaction.atomic
def study_define(
    *,
    slug: str,
    protocol: str,
    name: str | None = None,
    labels_per_item: int | None = None,
    agreement: str | None = None,
    questions: list[QuestionSpec] | None = None,
    parameters: Mapping[str, Any] | None = None,
    gold: GoldRule | None = None,
    min_posterior: float | None = None,
) -> StudyDefinition:
    """Create the study, or bring an existing one to this definition (``create_study``); an
    option left out keeps the study's value. Raises ``StudyConflict`` for an invalid definition
    or, once the study has labels, a change to what they mean."""
    if name is not None and len(name) > 200:  # Study.name's max_length
        raise StudyConflict("The study name must be at most 200 characters.")
    if protocol not in PROTOCOLS:
        raise StudyConflict(f"Unknown protocol “{protocol}”. Known: {', '.join(PROTOCOLS)}.")
    if agreement is not None and agreement not in AgreementRule.values:
        raise StudyConflict(f"Unknown agreement rule “{agreement}” ({', '.join(AgreementRule.values)}).")
    if labels_per_item is not None and not 1 <= labels_per_item <= 32767:
        raise StudyConflict("--labels-per-item must be between 1 and 32767.")
    spec = protocol_spec(protocol)
    if questions is not None:
        problem = spec.validate_questions(questions)
        if problem:  # refused now, not when the report first reads the questions
            raise StudyConflict(f"These questions cannot serve a {protocol} study: {problem}.")
    existing = Study.objects.select_for_update().filter(slug=slug).first()
    same = existing if existing is not None and existing.protocol == protocol else None
    if questions is None and not spec.questions and same is None:
        raise StudyConflict(f"A {protocol} study has no preset questions: give them with --questions F.csv.")
    wanted_parameters = _wanted_parameters(spec, same, parameters)
    wanted_labels = labels_per_item or (same.labels_per_item if same is not None else spec.labels_per_item)
    wanted_agreement = agreement or (same.agreement if same is not None else spec.agreement)
    wanted: dict[str, object] = {
        "protocol": protocol,
        "labels_per_item": wanted_labels,
        "agreement": wanted_agreement,
    }
    if wanted_agreement == AgreementRule.MAJORITY and wanted_labels < 3:
        raise StudyConflict(
            "A majority needs at least 3 labels per item (with 2, use --agreement unanimous)."
        )
    gold_fields = _gold_settings(existing, gold) if gold is not None else {}
    if min_posterior is not None:
        if not 0 < min_posterior <= 1:
            raise StudyConflict(f"--min-posterior must be above 0 and at most 1, not {min_posterior}.")
        gold_fields["min_posterior"] = min_posterior
    if existing is None:
        study = study_create(
            slug=slug,
            protocol=protocol,
            name=name,
            labels_per_item=wanted_labels,
            agreement=wanted_agreement,
            questions=questions,
            parameters=wanted_parameters,
            **gold_fields,
        )
        return StudyDefinition(study=study, created=True, changed=[])
    changed = [field for field, value in wanted.items() if getattr(existing, field) != value]
    if same is not None and existing.parameters != wanted_parameters:
        changed.append("parameters")
    stored = Question.objects.filter(study=existing).order_by("position", "id")
    if (questions is not None or same is None) and _question_fields(stored) != _question_fields(
        questions or spec.questions
    ):
        changed.append("questions")
    if changed:
        _redefinition_check(existing, changed, protocol)
        for field, value in wanted.items():
            setattr(existing, field, value)
        existing.parameters = wanted_parameters
        existing.save()
        if "questions" in changed:
            try:
                with transaction.atomic():
                    Question.objects.filter(study=existing).delete()
            except RestrictedError as exc:
                raise StudyConflict(
                    f"The study “{existing.slug}” already has final labels: its questions cannot change "
                    "(it would change what they mean). Create a new study instead."
                ) from exc
            _questions_create(existing, questions or spec.questions)
    # Gold settings and the name change whatever the labels: no redefinition check.
    free = gold_fields | ({"name": _unique_name(name, exclude=existing)} if name else {})
    free_changed = [field for field, value in free.items() if getattr(existing, field) != value]
    if free_changed:
        for field in free_changed:
            setattr(existing, field, free[field])
        existing.save(update_fields=free_changed)
        changed.extend(free_changed)
    return StudyDefinition(study=existing, created=False, changed=changed)


def _wanted_parameters(
    spec: ProtocolSpec, same: Study | None, given: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The study's parameters (its own, or the preset's) updated with the options given;
    ``StudyConflict`` for an unknown option or a missing required one."""
    given = {name: value for name, value in (given or {}).items() if value not in (None, "")}
    allowed = {option.name: option for option in spec.options}
    for name in given:
        if name not in allowed:
            flag = "--" + name.replace("_", "-")
            raise StudyConflict(f"{flag} is not an option of a {spec.key} study.")
    wanted = dict(same.parameters if same is not None else spec.parameters) | given
    for option in spec.options:
        value = wanted.get(option.name)
        flag = "--" + option.name.replace("_", "-")
        if option.required and not value:
            raise StudyConflict(
                f"A {spec.key} study needs {flag} {option.metavar} (see `manage.py create_study --help`)."
            )
        if value is not None and (not isinstance(value, str) or len(value) > 200 or "\x00" in value):
            raise StudyConflict(f"{flag} must be a name of at most 200 characters.")
        if option.column and option.name in given and value in MANIFEST_COLUMNS_NOT_KEPT:
            kept = [c for c in MANIFEST_KNOWN_COLUMNS if c not in MANIFEST_COLUMNS_NOT_KEPT]
            raise StudyConflict(
                f"{flag} {value}: an item keeps no value of the manifest column '{value}' to group by. "
                f"Use one of {', '.join(kept)}, or a column of your own (kept with each item)."
            )
    return wanted


@dataclass(frozen=True)
class GoldRule:
    """A study's gold settings as given (None: keep the study's own)."""

    rate: float | None = None
    min_accuracy: float | None = None
    min_gold: int | None = None


def _gold_settings(study: Study | None, gold: GoldRule) -> dict[str, Any]:
    """The gold fields to store; ``StudyConflict`` for values out of range or unreachable."""
    fields: dict[str, Any] = {}
    for flag, value, field in (
        ("--gold-rate", gold.rate, "gold_rate"),
        ("--min-gold-accuracy", gold.min_accuracy, "min_gold_accuracy"),
    ):
        if value is not None:
            if not 0 <= value <= 1:
                raise StudyConflict(f"{flag} must be between 0 and 1, not {value}.")
            fields[field] = value
    if gold.min_gold is not None:
        if not 1 <= gold.min_gold <= 32767:
            raise StudyConflict(f"--min-gold must be between 1 and 32767, not {gold.min_gold}.")
        fields["min_gold"] = gold.min_gold
    min_gold = fields.get("min_gold", study.min_gold if study is not None else 5)
    rule = fields.get("min_gold_accuracy", study.min_gold_accuracy if study is not None else None)
    if rule is not None and ("min_gold" in fields or "min_gold_accuracy" in fields):
        n_gold = (
            GoldAnswer.objects.filter(item__study=study).values("item_id").distinct().count() if study else 0
        )
        if min_gold > n_gold:
            raise StudyConflict(
                f"--min-gold {min_gold} is more than the study's {n_gold} gold item(s): no annotator "
                "could reach it. Import gold items first (import_gold), or lower --min-gold."
            )
    return fields


def _redefinition_check(study: Study, changed: list[str], protocol: str) -> None:
    """Refuse a change that would alter what the study's labels or images mean."""
    # Every label completes a seat on its item, so the core sees labels without the labels table.
    if Item.objects.filter(study=study, completed_seats__gt=0).exists():
        raise StudyConflict(
            f"The study “{study.slug}” already has labels: its {', '.join(changed)} cannot change "
            "(it would change what the labels mean). Create a new study instead"
            + (
                ", or change how labels become final answers with recompute_finals --aggregation."
                if changed == ["agreement"]
                else "."
            )
        )
    if "protocol" in changed:
        roles = protocol_spec(protocol).image_roles
        misfit = (
            ItemImage.objects.filter(item__study=study)
            .exclude(role__in=roles)
            .values_list("role", flat=True)
            .first()
        )
        if misfit is not None:
            raise StudyConflict(
                f"The study “{study.slug}” has items with {misfit!r} images, which a {protocol} study "
                f"does not use (its roles: {', '.join(roles)}). Create a new study instead."
            )


def questions_csv_read(path: str | os.PathLike[str]) -> list[QuestionSpec]:
    """Questions from a questions CSV (docs/reference/contracts.md#questions); ``ImportRejected``
    names the row and field of the first problem."""
    name = Path(path).name
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in reader.fieldnames or []]
            missing = [c for c in QUESTION_COLUMNS if c not in header]
            if missing:
                raise ImportRejected(f"{name}: missing column(s) {', '.join(missing)}")
            reader.fieldnames = header
            specs: list[QuestionSpec] = []
            for number, row in enumerate(reader, start=2):
                if len(specs) == _QUESTIONS_MAX:
                    raise ImportRejected(
                        f"{name}: row {number}: more than {_QUESTIONS_MAX} questions; a study asks at most "
                        f"{_QUESTIONS_MAX} (the labeling screen shows them all on one page)"
                    )
                if None in row:
                    raise ImportRejected(f"{name}: row {number}: more cells than header columns")
                specs.append(_question_row(number, {k: (v or "").strip() for k, v in row.items() if k}))
    except UnicodeDecodeError as exc:
        raise ImportRejected(f"{name}: not UTF-8 text ({exc.reason}); save the file as UTF-8") from exc
    except (OSError, csv.Error) as exc:
        raise ImportRejected(f"{path}: cannot read the questions CSV ({exc})") from exc
    if not specs:
        raise ImportRejected(f"{name}: no questions")
    keys = [s.key for s in specs]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated:
        raise ImportRejected(f"{name}: question keys must be unique ({repeated!r} appears twice)")
    return specs


def _question_row(number: int, row: dict[str, str]) -> QuestionSpec:
    where = f"row {number}"
    for column, value in row.items():
        if "\x00" in value:
            raise ImportRejected(f"{where}: {column} contains a NUL character")
    key = row["key"]
    if not _QUESTION_KEY_RE.match(key):
        raise ImportRejected(f"{where}: key must be 1 to 50 letters, digits, '-' or '_', got {key!r}")
    if not row["text"]:
        raise ImportRejected(f"{where}: empty text")
    if len(row["text"]) > _QUESTION_TEXT_MAX:
        raise ImportRejected(f"{where}: text is longer than {_QUESTION_TEXT_MAX} characters")
    kind = row.get("kind") or CHOICE.name
    problem = kind_problem(kind)
    if problem:
        raise ImportRejected(f"{where}: {problem}")
    hotkey = row.get("hotkey", "")
    if len(hotkey) > 1:
        raise ImportRejected(f"{where}: hotkey must be one character, got {hotkey!r}")
    choices: list[dict[str, Any]] = []
    for part in filter(None, (p.strip() for p in row["choices"].split("|"))):
        pieces = [piece.strip() for piece in part.split(":")]
        if len(pieces) == 2:  # value:Display name — the key is optional, its colon too
            pieces.append("")
        if len(pieces) != 3 or not pieces[0] or len(pieces[2]) > 1:
            raise ImportRejected(
                f"{where}: choice {part!r} must be value:Display name:key or value:Display name "
                "(the key one character, or left out)"
            )
        value, display, hotkey_of_choice = pieces
        if len(display) > _CHOICE_NAME_MAX:
            raise ImportRejected(
                f"{where}: choices: the display name of {value!r} is longer than {_CHOICE_NAME_MAX} characters"
            )
        if len(value) > _ANSWER_VALUE_MAX or "," in value:
            raise ImportRejected(
                f"{where}: choice value {value!r} must be at most {_ANSWER_VALUE_MAX} characters, without commas"
            )
        choices.append({"value": value, "name": display or value, "key": hotkey_of_choice.lower()})
    if len(choices) > _CHOICES_MAX:
        raise ImportRejected(
            f"{where}: choices: {len(choices)} answers; a question has at most {_CHOICES_MAX} "
            "(one key each on the labeling screen)"
        )
    values = [c["value"] for c in choices]
    if len(set(values)) != len(values):
        raise ImportRejected(f"{where}: choice values must be unique")
    keys = [c["key"] for c in choices if c["key"]]
    shared = next((k for k in keys if keys.count(k) > 1), None)
    if shared:
        raise ImportRejected(
            f"{where}: two choices share the key {shared!r}; give each its own or leave it out"
        )
    given = [("choices", k) for k in keys] + ([("hotkey", hotkey.lower())] if hotkey else [])
    for column, used in given:
        if used in SCREEN_KEYS:
            raise ImportRejected(
                f"{where}: {column} key {used!r} is the labeling screen's {SCREEN_KEYS[used]} key; choose another"
            )
    if question_kinds()[kind].needs_choices and len(choices) < 2:
        raise ImportRejected(f"{where}: a question needs at least two choices")
    for column in ("requires_reason", "clear"):  # a flag on the choices it names
        marked = [v for v in row.get(column, "").split("|") if v]
        unknown = [v for v in marked if v not in values]
        if unknown:
            raise ImportRejected(f"{where}: {column} {unknown[0]!r} is not one of the choices")
        for choice in choices:
            if choice["value"] in marked:
                choice[column] = True
    for column in ("default", "unresolvable"):
        if row.get(column) and row[column] not in values:
            raise ImportRejected(f"{where}: {column} {row[column]!r} is not one of the choices")
    return QuestionSpec(
        key=key,
        text=row["text"],
        choices=tuple(MappingProxyType(choice) for choice in choices),
        kind=kind,
        hotkey=hotkey,
        default_value=row.get("default", ""),
        unresolvable_value=row.get("unresolvable", ""),
    )


@dataclass(frozen=True)
class AnnotatorsAdded:
    """What ``annotators_add`` did: accounts created, accounts added, names already there."""

    created: tuple[Any, ...]
    added: tuple[Any, ...]
    unchanged: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.created or self.added)


def _username_problem(username: str) -> str | None:
    """Why ``username`` cannot be an account's name (Django's rule for usernames), or None."""
    max_length = get_user_model()._meta.get_field("username").max_length or 150
    if len(username) > max_length:
        return f"longer than {max_length} characters"
    try:
        get_user_model().username_validator(username)
    except ValidationError:
        return "letters, digits and @ . + - _ only"
    return None


@transaction.atomic
def annotators_add(*, study: Study, usernames: Iterable[str], allow_staff: bool = False) -> AnnotatorsAdded:
    """Make ``usernames`` annotators of ``study``, creating missing accounts (unusable password).
    Refuses the whole list (``AnnotatorsRefused``, ``StaffRefused`` unless ``allow_staff``)."""
    names = list(dict.fromkeys(name.strip() for name in usernames if name.strip()))
    if not names:
        raise AnnotatorsRefused("no username given: name at least one annotator")
    invalid = [f"{name!r} ({problem})" for name in names if (problem := _username_problem(name))]
    if invalid:
        raise AnnotatorsRefused(f"invalid username: {', '.join(invalid)}; nothing was changed")
    existing = {user.get_username(): user for user in get_user_model().objects.filter(username__in=names)}
    inactive = [name for name in names if name in existing and not existing[name].is_active]
    if inactive:
        raise AnnotatorsRefused(
            f"deactivated account: {', '.join(map(repr, inactive))}; reactivate it in the admin "
            "first; nothing was changed"
        )
    staff = [name for name in names if name in existing and permissions.is_researcher(existing[name])]
    if staff and not allow_staff:
        roles = [
            f"{name!r} is {'an admin' if permissions.is_admin(existing[name]) else 'a researcher'}"
            for name in staff
        ]
        raise StaffRefused(f"{'; '.join(roles)}: not added as an annotator; nothing was changed", staff)
    group, _ = Group.objects.get_or_create(name=permissions.ANNOTATOR)
    members = set(study.annotators.filter(username__in=names).values_list("username", flat=True))
    in_group = set(group.user_set.filter(username__in=names).values_list("username", flat=True))
    created, added, unchanged = [], [], []
    for name in names:
        user = existing.get(name)
        if user is None:
            user = get_user_model().objects.create_user(username=name)  # no password: unusable
            created.append(user)
        elif name in members and name in in_group:
            unchanged.append(name)
            continue
        else:
            added.append(user)
        if name not in in_group:
            user.groups.add(group)
        if name not in members:
            study.annotators.add(user)
    return AnnotatorsAdded(created=tuple(created), added=tuple(added), unchanged=tuple(unchanged))
