"""Removing items from a study (``items_remove``), with a JSON backup that ``studies.restore``
brings them back from (docs/how-to/correct-mistakes.md)."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core import serializers
from django.db import router, transaction
from django.db.models import Count, Model
from django.db.models.deletion import CASCADE, PROTECT, RESTRICT, Collector

from studies.batching import batches, in_chunk_size, in_rows
from studies.csvio import atomic_file
from studies.errors import DomainError
from studies.imports.pipeline import Audit
from studies.models import Image, Item, ItemChange, ItemChangeAction, ItemImage, Study

BACKUP_FORMAT = "biaslab-removed-items"
BACKUP_VERSION = 1

# Rows that go with an item without being anyone's work, named by label (the core sits below annotate).
_NOT_DATA = {"studies.itemimage", "annotate.assignment"}


class ItemsNotFound(DomainError):
    """Some of the items named are not items of the study."""


class ItemsHaveData(DomainError):
    """Items hold labels, predictions or sampling rounds and ``with_labels`` was not given."""


@dataclass
class RemovalResult:
    """What ``items_remove`` removed (or, in a dry run, would remove)."""

    keys: list[str]
    removed: dict[str, int]
    files: list[str]
    backup: Path | None = None
    dry_run: bool = False
    held: dict[str, dict[str, int]] = field(default_factory=dict)


def plural(model: type[Model]) -> str:
    return str(model._meta.verbose_name_plural)


def items_resolve(*, study: Study, keys: Iterable[str], ids: Iterable[int] = ()) -> list[Item]:
    """The study's items named by key, then by numeric id (``ids``); ``ItemsNotFound`` names
    every one missing."""
    wanted = list(dict.fromkeys(keys))
    unreadable = [key for key in wanted if "\x00" in key]
    if unreadable:
        raise ItemsNotFound(
            f"the item key {unreadable[0]!r} contains a NUL character: no item is named so; nothing was removed"
        )
    ours = Item.objects.filter(study=study)
    by_key: dict[str, Item] = {item.key: item for item in in_rows(ours, "key", wanted)}
    wanted_ids = list(dict.fromkeys(ids))
    by_id: dict[int, Item] = {item.pk: item for item in in_rows(ours, "pk", wanted_ids)}
    missing = [k for k in wanted if k not in by_key] + [f"id:{pk}" for pk in wanted_ids if pk not in by_id]
    if missing:
        shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
        raise ItemsNotFound(f"not items of the study '{study.slug}': {shown}; nothing was removed")
    items = [by_key[k] for k in wanted] + [by_id[pk] for pk in wanted_ids]
    return list({item.pk: item for item in items}.values())


def _image_links(ids: list[int]) -> dict[int, list[int]]:
    """Image id → the ids among ``ids`` of the items showing it."""
    links: dict[int, list[int]] = {}
    for item_id, image_id in in_rows(ItemImage.objects, "item_id", ids, "item_id", "image_id"):
        links.setdefault(image_id, []).append(item_id)
    return links


def _shared(image_ids: Iterable[int], removed: set[int]) -> set[int]:
    """The images among ``image_ids`` that an item not ``removed`` shows too: their files stay."""
    links = in_rows(ItemImage.objects, "image_id", sorted(image_ids), "image_id", "item_id")
    return {image_id for image_id, item_id in links if item_id not in removed}


def _counts_by(model: type[Model], name: str, ids: list[int]) -> Iterator[tuple[int, int]]:
    """(value of the foreign key ``name``, rows of ``model`` with it) for the values ``ids``."""
    yield from in_rows(model._base_manager.values(name).annotate(n=Count("pk")), name, ids, name, "n")


def _held(ids: list[int], links: dict[int, list[int]], orphans: list[int]) -> dict[int, Counter[str]]:
    """Per item id, the rows that are someone's work (labels, round entries…) and the predictions
    on its images that would go with them."""
    held: dict[int, Counter[str]] = {}
    for parent, parent_ids, items_of in ((Item, ids, lambda pk: [pk]), (Image, orphans, links.get)):
        for relation in parent._meta.related_objects:
            model = relation.related_model
            if not goes_with(relation) or model._meta.label_lower in _NOT_DATA:
                continue
            for parent_id, n in _counts_by(model, relation.field.name, parent_ids):
                for item_id in items_of(parent_id) or []:
                    held.setdefault(item_id, Counter())[plural(model)] += n
    return held


def goes_with(relation: Any) -> bool:
    """Rows of this relation go with the row they point to (CASCADE, RESTRICT, PROTECT; not SET_NULL)."""
    return not relation.many_to_many and relation.on_delete in (CASCADE, PROTECT, RESTRICT)


def _collect(model: type[Model], objs: list[Any], restricting: bool = False) -> Collector:
    """A deletion collector holding ``objs`` and their cascades, a chunk at a time; with
    ``restricting``, the rows that refuse an item's deletion (RESTRICT/PROTECT) are collected too."""
    collector = Collector(using=router.db_for_write(model))
    refusing = (
        [r for r in Item._meta.related_objects if r.on_delete in (PROTECT, RESTRICT)] if restricting else []
    )
    for chunk in batches(objs, in_chunk_size()):
        for relation in refusing:
            collector.collect(
                relation.related_model._base_manager.filter(**{f"{relation.field.name}__in": chunk})
            )
        collector.collect(chunk)
    return collector


def _collected(collector: Collector) -> list[Model]:
    """Every row the collector will delete, images and items first (parents before children)."""
    rows: list[Model] = [*chain(*collector.data.values(), *collector.fast_deletes)]
    order = {Image: 0, Item: 1, ItemImage: 2}
    return sorted(rows, key=lambda row: (order.get(type(row), 3), type(row)._meta.label_lower, row.pk))


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
    """Remove ``items`` of ``study`` in one transaction, after writing the backup to
    ``backup_path``; items holding data are refused unless ``with_labels`` (``ItemsHaveData``).
    ``dry_run``: check and count only."""
    if any(item.study_id != study.pk for item in items):
        raise ItemsNotFound("every item removed must belong to the study")
    if with_labels and backup_path is None and not dry_run:
        raise DomainError("removing items with their labels needs a backup file")
    if backup_path is not None and backup_path.exists() and not dry_run:
        raise DomainError(f"the backup file {backup_path} already exists: name another one")
    audit = Audit(user=user, source=source)
    with transaction.atomic():
        # Read again under a row lock, in id order (no lock cycles between removals).
        items = list(
            in_rows(Item.objects.select_for_update().order_by("pk"), "pk", sorted(i.pk for i in items))
        )
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
            plural(type(row)) for row in rows if not isinstance(row, Item | ItemImage)
        )
        images = list(in_rows(Image.objects, "pk", orphans))
        result.files = sorted(image.file for image in images)
        if dry_run:
            for relation in Image._meta.related_objects:
                if relation.on_delete is CASCADE and not relation.many_to_many:
                    model = relation.related_model
                    n = sum(n for _, n in _counts_by(model, relation.field.name, orphans))
                    if n:
                        counts[plural(model)] += n
            result.removed = dict(counts)
            return result
        # Serialized before they go: delete() clears the instances' primary keys.
        serialized = json.loads(serializers.serialize("json", rows))
        item_collector.delete()
        if images:
            # Only now: the image links that PROTECT the files are gone with the items.
            image_collector = _collect(Image, images)
            image_rows = _collected(image_collector)
            counts.update(plural(type(row)) for row in image_rows if not isinstance(row, Image))
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
        transaction.on_commit(lambda: files_unlink(files))
    return result


def _file_b64(name: str) -> str | None:
    """The bytes of a stored file, base64; None when it is already missing from MEDIA_ROOT."""
    try:
        return base64.b64encode((Path(settings.MEDIA_ROOT) / name).read_bytes()).decode("ascii")
    except FileNotFoundError:
        return None


def _backup_write(path: Path, document: dict[str, Any]) -> None:
    """Write the backup whole or not at all (temporary file, then rename)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path, prefix=".backup-", encoding="utf-8") as fh:
            json.dump(document, fh, ensure_ascii=False)
    except OSError as exc:
        raise DomainError(
            f"cannot write the backup file {path} ({exc.strerror or exc}); nothing was removed"
        ) from exc


def files_unlink(names: list[str]) -> None:
    """Remove files of deleted Image rows, unless an Image row points to them again."""
    for name in set(names) - set(in_rows(Image.objects, "file", names, "file")):
        (Path(settings.MEDIA_ROOT) / name).unlink(missing_ok=True)
