"""Bringing removed items back from a ``studies.removal`` backup (``import_images --restore``):
the whole file checked first, then every row and file written in one transaction."""

from __future__ import annotations

import base64
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import serializers
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.core.serializers.base import DeserializationError
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import JSONField, Model, Q

from studies.batching import in_rows
from studies.errors import DomainError, ImportRejected
from studies.imports.images import ValidatedImage, file_write, image_file_validate
from studies.imports.pipeline import Audit
from studies.jsonbounds import MAX_JSON_DEPTH, JSONOutOfBounds, json_bounds_check, json_loads_bounded
from studies.kinds import kind_of
from studies.models import Image, Item, ItemChange, ItemChangeAction, ItemImage, Question, Study
from studies.removal import (
    BACKUP_FORMAT,
    BACKUP_VERSION,
    files_unlink,
    goes_with,
    plural,
)

# A backup nests its stored JSON values four levels deep: document, rows, row, fields.
_BACKUP_MAX_DEPTH = MAX_JSON_DEPTH + 4
_STORAGE_NAME = re.compile(r"images/[0-9a-f]{2}/[0-9a-f]{64}\.[a-z0-9]{1,10}")


@dataclass
class RestoreResult:
    """What ``items_restore`` brought back (or, in a dry run, would bring back)."""

    keys: list[str]
    rows: dict[str, int]
    files: int
    dry_run: bool = False


@dataclass
class _Row:
    """One row of a backup, read and checked: where it is, and the object it saves."""

    number: int
    obj: Any

    @property
    def model(self) -> type[Model]:
        return type(self.obj)

    def __str__(self) -> str:
        return f"row {self.number} ({self.model._meta.label_lower} {self.obj.pk})"


def _restorable() -> dict[str, type[Model]]:
    """The models whose rows a removal writes to its backup, by label."""
    found: dict[str, type[Model]] = {}
    todo: list[type[Model]] = [Item, Image]
    while todo:
        model = todo.pop()
        if model._meta.label_lower not in found:
            found[model._meta.label_lower] = model
            todo += [r.related_model for r in model._meta.related_objects if goes_with(r)]
    return found


def _refuse(path: Path, problem: str) -> ImportRejected:
    return ImportRejected(f"{path}: {problem}; nothing was written")


def _backup_read(path: Path) -> dict[str, Any]:
    """The backup document, read through the JSON bounds and checked for its shape."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ImportRejected(f"{path}: file not found") from exc
    except OSError as exc:
        raise ImportRejected(f"{path}: not a readable backup file ({exc.strerror or exc})") from exc
    try:
        document = json_loads_bounded(
            raw, field="the backup", max_depth=_BACKUP_MAX_DEPTH, max_bytes=max(len(raw), 1)
        )
    except JSONOutOfBounds as exc:
        raise ImportRejected(f"{path}: not a readable backup file ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != BACKUP_FORMAT:
        raise ImportRejected(f'{path}: not a remove_items backup (no "format": "{BACKUP_FORMAT}")')
    if document.get("version") != BACKUP_VERSION:
        raise ImportRejected(f"{path}: backup version {document.get('version')!r} is not {BACKUP_VERSION}")
    shapes = (("items", list), ("rows", list), ("files", dict), ("questions", dict))
    for name, kind in shapes:
        if name in document and not isinstance(document[name], kind):
            raise _refuse(path, f'"{name}" is not a {"list" if kind is list else "mapping"}')
    if not all(isinstance(key, str) for key in document.get("items", [])):
        raise _refuse(path, '"items" holds something other than item keys')
    return document


def _rows_read(path: Path, document: dict[str, Any]) -> list[_Row]:
    """Every row of the backup as an unsaved object; refuses the first that cannot be restored."""
    models = _restorable()
    rows: list[_Row] = []
    seen: set[tuple[str, Any]] = set()
    for number, row in enumerate(document.get("rows", []), start=1):
        model = row.get("model") if isinstance(row, dict) else None
        if model not in models:
            raise _refuse(
                path,
                f"row {number} is a {model!r} row: a restore takes only the rows remove_items "
                f"writes ({', '.join(sorted(models))})",
            )
        pk = row.get("pk")
        if (
            not isinstance(pk, int)
            or isinstance(pk, bool)
            or pk < 1
            or not isinstance(row.get("fields"), dict)
        ):
            raise _refuse(path, f"row {number} ({model}) has no id or no fields")
        if (model, pk) in seen:
            raise _refuse(path, f"row {number} ({model} {pk}) is in the backup twice")
        seen.add((model, pk))
        try:
            (obj,) = serializers.deserialize("python", [row])
            for json_field in obj.object._meta.concrete_fields:
                if isinstance(json_field, JSONField):
                    json_bounds_check(getattr(obj.object, json_field.attname), field=json_field.name)
        except (
            DeserializationError,
            FieldDoesNotExist,
            ValidationError,
            JSONOutOfBounds,
            TypeError,
            ValueError,
        ) as exc:
            raise _refuse(path, f"row {number} ({model} {pk}) cannot be read ({exc})") from exc
        rows.append(_Row(number, obj.object))
    return rows


def _existing(model: type[Model], pks: Iterable[Any], *scope: Q) -> set[Any]:
    """The ``pks`` that name a row of ``model`` (within ``scope``) now."""
    return set(in_rows(model._base_manager.filter(*scope), "pk", pks, "pk"))


class _RestoreCheck:
    """Every check a backup passes before anything is written (docs/reference/contracts.md);
    the first row that fails refuses the whole backup."""

    def __init__(self, *, study: Study, path: Path, document: dict[str, Any]) -> None:
        self.study, self.path, self.document = study, path, document
        self.rows = _rows_read(path, document)
        self.by_model: dict[type[Model], dict[Any, _Row]] = {}
        for row in self.rows:
            self.by_model.setdefault(row.model, {})[row.obj.pk] = row
        self.keys = list(dict.fromkeys(str(key) for key in document.get("items", [])))
        self.files = _files_check(path, document.get("files") or {})
        self.image_ids: dict[int, int] = {}  # backup id → id now, for images stored again meanwhile

    def refuse(self, row: _Row, problem: str) -> ImportRejected:
        return _refuse(self.path, f"{row} {problem}")

    def run(self) -> None:
        self._items()
        self._images()
        for model, rows in self.by_model.items():
            # An image stored again meanwhile is reused (``image_ids``); every other row needs a free id.
            taken = _existing(model, (pk for pk in rows if model is not Image or pk not in self.image_ids))
            for row in rows.values():
                if row.obj.pk in taken:
                    raise self.refuse(row, "would overwrite a row that exists (its id is taken)")
        self._references()
        self._answers()

    def _items(self) -> None:
        items = self.by_model.get(Item, {})
        if not items or sorted(row.obj.key for row in items.values()) != sorted(self.keys):
            raise _refuse(self.path, 'the item rows do not match the backup\'s "items"')
        for row in items.values():
            if row.obj.study_id != self.study.pk:
                raise self.refuse(row, f"belongs to another study, not '{self.study.slug}'")
        again = list(in_rows(Item.objects.filter(study=self.study), "key", self.keys, "key"))
        if again:
            raise ImportRejected(
                f"{self.path}: the study has these items again: {', '.join(sorted(again))}; remove "
                "them first (remove_items) to restore the backup"
            )
        changes = ItemChange.objects.filter(study=self.study, action=ItemChangeAction.REMOVED)
        removed = set(in_rows(changes, "item_key", self.keys, "item_key"))
        for row in items.values():
            if row.obj.key not in removed:
                raise self.refuse(
                    row, f"names the item {row.obj.key}, which was never removed from the study"
                )

    def _images(self) -> None:
        """Images of the backup: a file stored again meanwhile is reused, others are checked against their file."""
        images = self.by_model.get(Image, {})
        linked = {row.obj.image_id for row in self.by_model.get(ItemImage, {}).values()}
        hashes = {row.obj.sha256 for row in images.values()}
        existing: dict[str, int] = dict(in_rows(Image.objects, "sha256", hashes, "sha256", "pk"))
        for pk, row in images.items():
            image = row.obj
            if pk not in linked:
                raise self.refuse(row, "is an image none of the backup's items shows")
            if image.sha256 in existing:
                self.image_ids[pk] = existing[image.sha256]
                continue
            # Its file is the one its hash names, and the backup's bytes are those.
            stored = self.files.get(image.file)
            named = f"images/{image.sha256[:2]}/{image.sha256}"
            if not _STORAGE_NAME.fullmatch(image.file) or image.file.rsplit(".", 1)[0] != named:
                raise self.refuse(row, f"names the file {image.file!r}, which is not the file of its hash")
            if stored is not None and stored.sha256 != image.sha256:
                raise self.refuse(row, f"does not match the bytes of its file {image.file}")
        ours = {row.obj.file for row in images.values()}
        for name in self.files:
            if name not in ours:
                raise _refuse(self.path, f"the backup's file {name} is not the file of one of its images")

    def _references(self) -> None:
        """Each row's links, in row order: the first that points outside the study refuses."""
        user_model = get_user_model()
        wanted: dict[type[Model], set[Any]] = {}
        links: list[tuple[_Row, Any, Any]] = []
        for row in self.rows:
            for field_ in row.model._meta.concrete_fields:
                value = getattr(row.obj, field_.attname) if field_.is_relation else None
                if value is not None:
                    links.append((row, field_, value))
                    wanted.setdefault(cast(type[Model], field_.related_model), set()).add(value)
        found: dict[type[Model], set[Any]] = {}
        for target, values in wanted.items():
            fields = target._meta.concrete_fields
            study_field = next((f for f in fields if f.name == "study" and f.related_model is Study), None)
            if target is user_model or target is Image:
                found[target] = _existing(target, values)
            elif target is not Study and target not in self.by_model and study_field is not None:
                # The study's own question, prompt, round or run (a nullable study: or no study's).
                scope = (
                    Q(study=self.study) | Q(study__isnull=True) if study_field.null else Q(study=self.study)
                )
                found[target] = _existing(target, values, scope)
        for row, field_, value in links:
            target = field_.related_model
            if target is Study:
                if value != self.study.pk:
                    raise self.refuse(row, f"belongs to another study, not '{self.study.slug}'")
            elif target is Question:
                if value not in found[Question]:
                    key = (self.document.get("questions") or {}).get(str(value))
                    named = f"'{key}' (id {value})" if key else f"id {value}"
                    raise self.refuse(
                        row,
                        f"answers the question {named}, which the study '{self.study.slug}' no longer "
                        "has (its questions changed since the removal): define it again to restore",
                    )
            elif target is user_model:
                if value not in found[user_model]:
                    raise self.refuse(
                        row, f"names the account id {value} ({field_.name}), which does not exist"
                    )
            elif target in self.by_model and value in self.by_model[target]:
                pass
            elif target is Image and row.model is ItemImage and value in found[Image]:
                pass  # an image other items still show stayed in place
            elif target is not Image and target in found and value in found[target]:
                pass  # the study's own prompt, round or run (an image: only an item's link above)
            else:
                raise self.refuse(
                    row,
                    f"points to {target._meta.label_lower} {value} ({field_.name}), which is not the study's",
                )

    def _answers(self) -> None:
        """Labels, final labels and their revisions hold answers to one of their item's questions."""
        questions = {q.pk: q for q in Question.objects.filter(study=self.study)}
        items = {pk: row.obj for pk, row in self.by_model.get(Item, {}).items()}
        for row in self.rows:
            fields = {f.name: f for f in row.model._meta.concrete_fields}
            if "value" not in fields:
                continue
            # A revision answers through the row it revises (a label revision: its label).
            parent = row.obj
            for f in fields.values():
                revised = self.by_model.get(cast(type[Model], f.related_model), {}) if f.is_relation else {}
                if "question" not in fields and getattr(row.obj, f.attname) in revised:
                    parent = revised[getattr(row.obj, f.attname)].obj
            question = questions.get(getattr(parent, "question_id", None) or 0)
            item = items.get(getattr(parent, "item_id", None) or 0)
            if question is None or item is None:
                continue  # a row that is no answer (links are checked already)
            if item.question_keys and question.key not in item.question_keys:
                raise self.refuse(
                    row, f"answers the question '{question.key}', which the item {item.key} does not ask"
                )
            value = row.obj.value
            if value == "" and fields["value"].blank:
                continue  # a final label's removal
            try:
                problem = (
                    kind_of(question).stored_problem(question, value)
                    if isinstance(value, str)
                    else "is not text"
                )
            except LookupError as exc:
                problem = str(exc)
            if problem:
                raise self.refuse(row, problem)


def _files_check(path: Path, files: dict[str, Any]) -> dict[str, ValidatedImage]:
    """The backup's files by name, checked (valid image, bytes match the name's hash), not written."""
    checked = {}
    for name, data in files.items():
        if data is None:
            continue
        try:
            if not isinstance(data, str):
                raise ValueError("not base64 text")
            validated = image_file_validate(base64.b64decode(data, validate=True))
        except (ValueError, DomainError) as exc:
            raise _refuse(path, f"the backup's file {name} is damaged ({exc})") from exc
        if validated.storage_name != name:
            raise _refuse(path, f"the backup's file {name} does not hold the bytes its name says")
        checked[name] = validated
    return checked


def items_restore(
    *,
    study: Study,
    backup_path: str | os.PathLike[str],
    user: Any = None,
    source: str = "",
    dry_run: bool = False,
) -> RestoreResult:
    """Bring back the items of an ``items_remove`` backup with the same ids and files, and a
    "restored" ``ItemChange`` each; ``ImportRejected`` naming the first bad row, nothing written.
    ``dry_run``: check and count only."""
    path = Path(backup_path)
    document = _backup_read(path)
    if document.get("study") != study.slug:
        raise ImportRejected(
            f"{path}: the backup holds items of the study '{document.get('study')}', not '{study.slug}'"
        )
    check = _RestoreCheck(study=study, path=path, document=document)
    check.run()
    files = list(check.files.values())
    # An image stored again meanwhile is not written: its links point to the stored one.
    new = [row for row in check.rows if not (row.model is Image and row.obj.pk in check.image_ids)]
    counts = Counter(plural(row.model) for row in new)
    result = RestoreResult(keys=check.keys, rows=dict(counts), files=len(files), dry_run=dry_run)
    if dry_run:
        return result
    audit = Audit(user=user, source=source)
    written: list[str] = []
    try:
        for validated in files:
            if not (Path(settings.MEDIA_ROOT) / validated.storage_name).exists():
                written.append(validated.storage_name)
            file_write(validated)
        try:
            with transaction.atomic():
                for row in sorted(new, key=lambda row: row.model is not Image):
                    for fk in row.model._meta.concrete_fields:
                        if fk.is_relation and fk.related_model is Image:
                            old = getattr(row.obj, fk.attname)
                            setattr(row.obj, fk.attname, check.image_ids.get(old, old))
                    # force_insert: a row that appeared meanwhile under the same id is never overwritten.
                    Model.save_base(row.obj, raw=True, force_insert=True)
                ItemChange.objects.bulk_create(
                    [
                        audit.record(
                            study=study,
                            item=row.obj,
                            action=ItemChangeAction.RESTORED,
                            changes={"backup": str(path.resolve())},
                        )
                        for row in check.by_model[Item].values()
                    ]
                )
        except (IntegrityError, DatabaseError) as exc:
            raise _refuse(path, f"the backup cannot be restored ({exc})") from exc
    except BaseException:
        files_unlink(written)
        raise
    return result
