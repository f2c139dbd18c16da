"""Removing items from a study, and bringing removed items back from their backup.

``items_remove`` deletes items with everything that hangs on them: image links, and — only when
asked (``with_labels``) — their labels, final labels, work seats, history, sampling-round
entries, and the image files no item uses any more with what detectors said about them. It
finds those rows through Django's own deletion collector, so the core never imports the apps
above it (``annotate``, ``detectors``, ``estimates``): whatever points to an item is found.

Before anything is removed, everything that goes is written to a JSON backup: the rows, as
Django's serializer writes them (primary keys kept), and the bytes of the files that leave
MEDIA_ROOT. ``items_restore`` (``import_images --restore``) reads it back: same rows, same
ids, same files, so labels, agreement and reports come back as they were.

One transaction each: a refused removal, a failed backup or a failed restore leaves the
database and MEDIA_ROOT as they were. Every read and the deletion go a chunk of items (or
images) at a time (``studies.batching``): a removal of any size stays under the database's
limit of values per statement.
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import serializers
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.core.serializers.base import DeserializationError
from django.db import DatabaseError, IntegrityError, router, transaction
from django.db.models import Count, JSONField, Model, Q
from django.db.models.deletion import CASCADE, PROTECT, RESTRICT, Collector

from metrics.coco_names import UnknownClassName, normalise_class_name
from studies.batching import batches, in_chunk_size, in_chunks
from studies.errors import DomainError, ImportRejected
from studies.imports.images import ValidatedImage, file_write, image_file_validate
from studies.imports.pipeline import Audit
from studies.jsonbounds import MAX_JSON_DEPTH, JSONOutOfBounds, json_bounds_check, json_loads_bounded
from studies.models import (
    Image,
    Item,
    ItemChange,
    ItemChangeAction,
    ItemImage,
    Question,
    QuestionKind,
    Study,
)

BACKUP_FORMAT = "biaslab-removed-items"
BACKUP_VERSION = 1

# Rows that go with an item without being anyone's work: its image links, and its work seats
# (a seat without a label is an item handed out, not labelled; a seat with one comes with
# its label, which is what counts). Named by label, not imported: the core sits below
# ``annotate``.
_NOT_DATA = {"studies.itemimage", "annotate.assignment"}


class ItemsNotFound(DomainError):
    """Some of the items named are not items of the study."""


class ItemsHaveData(DomainError):
    """Items hold labels, predictions or sampling rounds and ``with_labels`` was not given."""


@dataclass
class RemovalResult:
    """What ``items_remove`` removed (or, in a dry run, would remove)."""

    keys: list[str]
    # Rows removed with the items, by model name ("labels": 4), items and image links excluded.
    removed: dict[str, int]
    files: list[str]
    backup: Path | None = None
    dry_run: bool = False
    # Per item that held data: what it held ("sdxl/0.png": {"labels": 2}).
    held: dict[str, dict[str, int]] = field(default_factory=dict)


def _name(model: type[Model], n: int) -> str:
    meta = model._meta
    return str(meta.verbose_name if n == 1 else meta.verbose_name_plural)


def _label(model: type[Model]) -> str:
    return f"{model._meta.app_label}.{model._meta.model_name}"


def items_resolve(*, study: Study, keys: Iterable[str], ids: Iterable[int] = ()) -> list[Item]:
    """The study's items named by key, then those named by numeric id (``ids``: only ever
    asked for so, never guessed from a key that names no item). Raises ``ItemsNotFound``
    naming every key (and ``id:N``) that is not an item of the study."""
    wanted = list(dict.fromkeys(keys))
    unreadable = [key for key in wanted if "\x00" in key]
    if unreadable:
        raise ItemsNotFound(
            f"the item key {unreadable[0]!r} contains a NUL character: no item is named so; nothing was removed"
        )
    by_key: dict[str, Item] = {}
    for keys_chunk in in_chunks(wanted):
        by_key.update((item.key, item) for item in Item.objects.filter(study=study, key__in=keys_chunk))
    wanted_ids = list(dict.fromkeys(ids))
    by_id: dict[int, Item] = {}
    for chunk in in_chunks(wanted_ids):
        by_id.update((item.pk, item) for item in Item.objects.filter(study=study, pk__in=chunk))
    missing = [k for k in wanted if k not in by_key] + [f"id:{pk}" for pk in wanted_ids if pk not in by_id]
    if missing:
        shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
        raise ItemsNotFound(f"not items of the study '{study.slug}': {shown}; nothing was removed")
    items = [by_key[k] for k in wanted] + [by_id[pk] for pk in wanted_ids]
    return list({item.pk: item for item in items}.values())


def _locked(items: list[Item]) -> list[Item]:
    """The items read again under a row lock (a label or an import arriving meanwhile waits for
    the removal), in id order: the chunks too, so two removals never wait on each other in a
    circle."""
    locked: list[Item] = []
    for chunk in in_chunks(sorted(item.pk for item in items)):
        locked += Item.objects.select_for_update().filter(pk__in=chunk).order_by("pk")
    return locked


def _image_links(ids: list[int]) -> dict[int, list[int]]:
    """Image id → the ids among ``ids`` of the items showing it."""
    links: dict[int, list[int]] = {}
    for chunk in in_chunks(ids):
        for item_id, image_id in ItemImage.objects.filter(item_id__in=chunk).values_list(
            "item_id", "image_id"
        ):
            links.setdefault(image_id, []).append(item_id)
    return links


def _shared(image_ids: Iterable[int], removed: set[int]) -> set[int]:
    """The images among ``image_ids`` that an item not ``removed`` shows too: their files stay."""
    shared: set[int] = set()
    for chunk in in_chunks(sorted(image_ids)):
        for image_id, item_id in ItemImage.objects.filter(image_id__in=chunk).values_list(
            "image_id", "item_id"
        ):
            if item_id not in removed:
                shared.add(image_id)
    return shared


def _counts_by(model: type[Model], name: str, ids: list[int]) -> Iterator[tuple[int, int]]:
    """(value of the foreign key ``name``, rows of ``model`` with it) for the values ``ids``."""
    for chunk in in_chunks(ids):
        counts = model._base_manager.filter(**{f"{name}__in": chunk}).values(name).annotate(n=Count("pk"))
        for row in counts:
            yield row[name], row["n"]


def _held(ids: list[int], links: dict[int, list[int]], orphans: list[int]) -> dict[int, Counter[str]]:
    """Per item id, the rows pointing at it that are someone's work (labels, final labels,
    round entries…) and the predictions on its images that would go with them (``links``:
    image id → the items removed that show it). One query per kind of row and chunk."""
    held: dict[int, Counter[str]] = {}
    for relation in Item._meta.related_objects:
        model = relation.related_model
        if not _goes_with(relation) or _label(model) in _NOT_DATA:
            continue
        for item_id, n in _counts_by(model, relation.field.name, ids):
            held.setdefault(item_id, Counter())[_name(model, 2)] += n
    for relation in Image._meta.related_objects:
        model = relation.related_model
        if not _goes_with(relation) or _label(model) in _NOT_DATA:
            continue
        for image_id, n in _counts_by(model, relation.field.name, orphans):
            for item_id in links.get(image_id, []):
                held.setdefault(item_id, Counter())[_name(model, 2)] += n
    return held


def _cascades(relation: Any) -> bool:
    return relation.on_delete is CASCADE


def _goes_with(relation: Any) -> bool:
    """Rows of this relation are removed with the row they point to (cascade, or refusing it
    alone: RESTRICT / PROTECT). SET_NULL rows (the audit trail) stay."""
    return not relation.many_to_many and relation.on_delete in (CASCADE, PROTECT, RESTRICT)


def _collect(model: type[Model], objs: list[Any], restricting: bool = False) -> Collector:
    """A deletion collector holding ``objs`` and what cascades from them, collected a chunk of
    ``objs`` at a time: the collector looks up each relation's rows for the objects it is
    given (on PostgreSQL all of them in one list). With ``restricting``, each chunk's rows
    that refuse the deletion on their own (``_restricting``) are collected first, so the
    collector removes them too."""
    collector = Collector(using=router.db_for_write(model))
    for chunk in batches(objs, in_chunk_size()):
        for queryset in _restricting(chunk) if restricting else ():
            collector.collect(queryset)
        collector.collect(chunk)
    return collector


def _collected(collector: Collector) -> list[Model]:
    """Every row the collector will delete (fast-delete querysets read now), images and items
    first so a backup reads parent before child."""
    rows: list[Model] = []
    for instances in collector.data.values():
        rows.extend(instances)
    for queryset in collector.fast_deletes:
        rows.extend(queryset)
    order = {Image: 0, Item: 1, ItemImage: 2}
    return sorted(rows, key=lambda row: (order.get(type(row), 3), _label(type(row)), row.pk))


def _restricting(items: list[Any]) -> list[Any]:
    """Querysets of the rows that refuse an item's deletion on their own (RESTRICT/PROTECT),
    e.g. its entries in sampling rounds; removing the item with its data removes them too."""
    querysets = []
    for relation in Item._meta.related_objects:
        if relation.on_delete in (PROTECT, RESTRICT):
            querysets.append(
                relation.related_model._base_manager.filter(**{f"{relation.field.name}__in": items})
            )
    return querysets


def items_remove(
    *,
    study: Study,
    items: list[Item],
    with_labels: bool = False,
    backup_path: Path | None = None,
    user: Any = None,
    source: str = "",
    dry_run: bool = False,
) -> RemovalResult:
    """Remove ``items`` of ``study`` in one transaction; see the module docstring.

    Items holding labels, final labels, predictions (on files no other item uses) or sampling
    round entries are refused, naming each with what it holds (``ItemsHaveData``, nothing
    removed), unless ``with_labels``. A backup is written to ``backup_path`` (required with
    ``with_labels``; refused if the file exists) before the transaction commits; if it cannot
    be written nothing is removed. Files no item points to any more leave MEDIA_ROOT once the
    transaction has committed. Each item gets an ``ItemChange`` "removed" audit record.
    ``dry_run``: everything is checked and counted, nothing removed or written.
    """
    if any(item.study_id != study.pk for item in items):
        raise ItemsNotFound("every item removed must belong to the study")
    if with_labels and backup_path is None and not dry_run:
        raise DomainError("removing items with their labels needs a backup file")
    if backup_path is not None and backup_path.exists() and not dry_run:
        raise DomainError(f"the backup file {backup_path} already exists: name another one")
    audit = Audit(user=user, source=source)
    with transaction.atomic():
        # Locked: a label or a new import arriving meanwhile waits for the removal.
        items = _locked(items)
        ids = [item.pk for item in items]
        keys = {item.pk: item.key for item in items}
        links = _image_links(ids)
        orphans = sorted(links.keys() - _shared(links, set(ids)))
        held = {
            keys[item_id]: dict(counts) for item_id, counts in _held(ids, links, orphans).items() if counts
        }
        result = RemovalResult(
            keys=[item.key for item in items], removed={}, files=[], held=held, dry_run=dry_run
        )
        if held and not with_labels:
            shown = "; ".join(
                f"{key} ({', '.join(f'{n} {name}' for name, n in counts.items())})"
                for key, counts in held.items()
            )
            raise ItemsHaveData(
                f"{len(held)} item(s) of the study '{study.slug}' have labels, predictions or sampling "
                f"rounds: {shown}. Nothing was removed. To remove them with all of that, add "
                "--with-labels: everything removed is first written to a JSON backup that "
                "`import_images --restore` brings back."
            )
        item_collector = _collect(Item, items, restricting=True)
        rows = _collected(item_collector)
        counts: Counter[str] = Counter(
            _name(type(row), 2) for row in rows if not isinstance(row, Item | ItemImage)
        )
        images = [image for chunk in in_chunks(orphans) for image in Image.objects.filter(pk__in=chunk)]
        result.files = sorted(image.file for image in images)
        if dry_run:
            for relation in Image._meta.related_objects:
                if _cascades(relation) and not relation.many_to_many:
                    model = relation.related_model
                    n = sum(n for _, n in _counts_by(model, relation.field.name, orphans))
                    if n:
                        counts[_name(model, 2)] += n
            result.removed = dict(counts)
            return result
        # Serialized before they go: delete() clears the instances' primary keys.
        serialized = json.loads(serializers.serialize("json", rows))
        item_collector.delete()
        if images:
            # Only now: the image links that PROTECT the files are gone with the items.
            image_collector = _collect(Image, images)
            image_rows = _collected(image_collector)
            counts.update(_name(type(row), 2) for row in image_rows if not isinstance(row, Image))
            serialized = json.loads(serializers.serialize("json", image_rows)) + serialized
            image_collector.delete()
        result.removed = dict(counts)
        ItemChange.objects.bulk_create(
            [
                audit.record(
                    study=study,
                    item=None,
                    key=key,
                    action=ItemChangeAction.REMOVED,
                    changes={"removed with it": held.get(key, {}), "backup": str(backup_path or "")},
                )
                for key in result.keys
            ]
        )
        if backup_path is not None:
            _backup_write(
                backup_path,
                {
                    "format": BACKUP_FORMAT,
                    "version": BACKUP_VERSION,
                    "study": study.slug,
                    "removed_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "removed_by": audit.actor,
                    "items": result.keys,
                    # The study's questions by id: a restore names one that is gone by its key.
                    "questions": {str(pk): key for pk, key in study.questions.values_list("pk", "key")},
                    "rows": serialized,
                    "files": {name: _file_b64(name) for name in result.files},
                },
            )
            result.backup = backup_path
        files = list(result.files)
        transaction.on_commit(lambda: _files_unlink(files))
    return result


def _file_b64(name: str) -> str | None:
    """The bytes of a stored file, base64; None when it is already missing from MEDIA_ROOT."""
    try:
        return base64.b64encode((Path(settings.MEDIA_ROOT) / name).read_bytes()).decode("ascii")
    except FileNotFoundError:
        return None


def _backup_write(path: Path, document: dict[str, Any]) -> None:
    """Write the backup whole or not at all (temporary file, then rename); an error refuses
    the removal (the caller's transaction rolls back)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".backup-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(document, fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise DomainError(
            f"cannot write the backup file {path} ({exc.strerror or exc}); nothing was removed"
        ) from exc


def _files_unlink(names: list[str]) -> None:
    """Remove files of deleted Image rows; a file some Image row points to again (the same
    bytes imported meanwhile) stays."""
    kept: set[str] = set()
    for chunk in in_chunks(sorted(set(names))):
        kept.update(Image.objects.filter(file__in=chunk).values_list("file", flat=True))
    for name in set(names) - kept:
        (Path(settings.MEDIA_ROOT) / name).unlink(missing_ok=True)


# --- restore ------------------------------------------------------------------------------------

# A backup nests its stored JSON values (an item's params, a prediction's output) four levels
# deep: document, rows, row, fields.
_BACKUP_MAX_DEPTH = MAX_JSON_DEPTH + 4
# Where an image file lives in MEDIA_ROOT: named by its hash (``ValidatedImage.storage_name``).
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
        return f"row {self.number} ({_label(self.model)} {self.obj.pk})"


def _restorable() -> dict[str, type[Model]]:
    """The models whose rows a removal writes to its backup, by label: items and images, and
    every model whose rows go with one of them (``_goes_with``), and so on down (a label's
    revisions). Nothing else — accounts, studies, questions, rounds, estimates — is restored."""
    found: dict[str, type[Model]] = {}
    todo: list[type[Model]] = [Item, Image]
    while todo:
        model = todo.pop()
        if _label(model) not in found:
            found[_label(model)] = model
            todo += [r.related_model for r in model._meta.related_objects if _goes_with(r)]
    return found


def _refuse(path: Path, problem: str) -> ImportRejected:
    return ImportRejected(f"{path}: {problem}; nothing was written")


def _backup_read(path: Path) -> dict[str, Any]:
    """The backup document, read through the JSON bounds (no depth, NUL character or number the
    database cannot store) and checked for its shape."""
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
    """Every row of the backup as an unsaved object, refusing the first that is not of a model
    a removal writes or cannot be read."""
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


def _existing(model: type[Model], pks: Iterable[Any], **filters: Any) -> set[Any]:
    """The ``pks`` that name a row of ``model`` (matching ``filters``) now."""
    found: set[Any] = set()
    for chunk in in_chunks(sorted(set(pks))):
        found.update(model._base_manager.filter(pk__in=chunk, **filters).values_list("pk", flat=True))
    return found


def _answer_problem(question: Question, value: str) -> str | None:
    """Why ``value`` is not a stored answer to ``question`` (None when it is): one of its choice
    values; box questions a comma-separated list of them; class questions COCO class names."""
    if question.kind == QuestionKind.CLASSES:
        parts = value.split(",") if value else []
        try:
            if all(normalise_class_name(part) == part for part in parts):
                return None
        except (UnknownClassName, TypeError):
            pass
        return f"{value!r} is not a list of object class names"
    if question.kind == QuestionKind.BOXES:
        if all(question.choice(part) is not None for part in (value.split(",") if value else [])):
            return None
    elif question.choice(value) is not None:
        return None
    return f"{value!r} is not an answer to the question '{question.key}' ({', '.join(question.values)})"


class _RestoreCheck:
    """Every check a backup passes before anything is written: each row is of a model a removal
    writes, new (its id free), and hangs on the study's own rows — its items, their images, its
    questions, rounds and runs — or on accounts that exist; answers are answers to their
    question. The first row that fails refuses the whole backup, named."""

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
            if model is not Image:
                taken = _existing(model, rows)
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
        again = [
            key
            for chunk in in_chunks(self.keys)
            for key in Item.objects.filter(study=self.study, key__in=chunk).values_list("key", flat=True)
        ]
        if again:
            raise ImportRejected(
                f"{self.path}: the study has these items again: {', '.join(sorted(again))}; remove "
                "them first (remove_items) to restore the backup"
            )
        removed = {
            key
            for chunk in in_chunks(self.keys)
            for key in ItemChange.objects.filter(
                study=self.study, action=ItemChangeAction.REMOVED, item_key__in=chunk
            ).values_list("item_key", flat=True)
        }
        for row in items.values():
            if row.obj.key not in removed:
                raise self.refuse(
                    row, f"names the item {row.obj.key}, which was never removed from the study"
                )

    def _images(self) -> None:
        """Images a backup holds are the files of its items; one whose bytes are stored again
        meanwhile (same hash, another id) is reused, any other must take a free id."""
        images = self.by_model.get(Image, {})
        linked = {row.obj.image_id for row in self.by_model.get(ItemImage, {}).values()}
        existing: dict[str, int] = {}
        for chunk in in_chunks(sorted({row.obj.sha256 for row in images.values()})):
            existing.update(Image.objects.filter(sha256__in=chunk).values_list("sha256", "pk"))
        taken = _existing(Image, (pk for pk, row in images.items() if row.obj.sha256 not in existing))
        for pk, row in images.items():
            image = row.obj
            if pk not in linked:
                raise self.refuse(row, "is an image none of the backup's items shows")
            if image.sha256 in existing:
                self.image_ids[pk] = existing[image.sha256]
                continue
            if pk in taken:
                raise self.refuse(row, "would overwrite a row that exists (its id is taken)")
            # Its file is the one its hash names (nowhere else in or outside MEDIA_ROOT), and the
            # bytes the backup holds for it are those.
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
            if target is user_model or target is Image:
                found[target] = _existing(target, values)
            elif target is Question:
                found[target] = _existing(target, values, study=self.study)
            elif target is not Study and target not in self.by_model:
                study_field = target._meta.get_field("study") if _has_study(target) else None
                if study_field is not None:
                    scope = Q(study=self.study) | (
                        Q(study__isnull=True) if study_field.null else Q(pk__in=[])
                    )
                    found[target] = {
                        pk
                        for chunk in in_chunks(sorted(values))
                        for pk in target._base_manager.filter(scope, pk__in=chunk).values_list(
                            "pk", flat=True
                        )
                    }
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
                    row, f"points to {_label(target)} {value} ({field_.name}), which is not the study's"
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
            problem = _answer_problem(question, value) if isinstance(value, str) else "is not text"
            if problem:
                raise self.refuse(row, problem)


def _has_study(model: type[Model]) -> bool:
    try:
        field_ = model._meta.get_field("study")
    except FieldDoesNotExist:
        return False
    return bool(field_.is_relation and field_.related_model is Study)


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
    """Bring back the items a ``items_remove`` backup holds, into the study they came from:
    the same rows with the same ids (labels, final labels, history, predictions, round entries)
    and the same files, and a "restored" ``ItemChange`` per item (who, when, from which file).

    A backup is data someone may have handed over, so it is checked whole first (``_RestoreCheck``)
    and refused whole (``ImportRejected`` naming the first row that fails, nothing written) when it
    is not such a backup, is of another study, holds a row of a model a removal does not write, a
    row whose id is taken, a row pointing outside the study's items, images, questions, rounds and
    runs or to an account that does not exist, an answer that is not one of its question's, an
    item key the study has again (remove it first) or never removed. A file whose bytes do not
    match their hash is refused too. Files written for a refused restore are removed again.
    ``dry_run``: everything is checked and counted, nothing written.
    """
    path = Path(backup_path)
    document = _backup_read(path)
    if document.get("study") != study.slug:
        raise ImportRejected(
            f"{path}: the backup holds items of the study '{document.get('study')}', not '{study.slug}'"
        )
    check = _RestoreCheck(study=study, path=path, document=document)
    check.run()
    files = list(check.files.values())
    counts: Counter[str] = Counter(
        _name(row.model, 2)
        for row in check.rows
        if not (row.model is Image and row.obj.pk in check.image_ids)
    )
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
                for row in sorted(check.rows, key=lambda row: row.model is not Image):
                    if row.model is Image and row.obj.pk in check.image_ids:
                        continue
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
        _files_unlink(written)
        raise
    return result
