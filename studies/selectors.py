"""Reads of the core: a study by slug, the questions an item asks, an item's images by role."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from django.db.models import Exists, OuterRef, Prefetch, QuerySet
from django.http import Http404

from studies.batching import prefetch_in_chunks
from studies.errors import StudyNotChosen
from studies.models import ImageRole, Item, ItemImage, Question, Study
from studies.protocols import PROTOCOLS

# An Item, or an Item with annotations: helpers that only add prefetches keep the type.
_ItemT = TypeVar("_ItemT", bound=Item)


def study_or_404(slug: str) -> Study:
    """The study with this slug, or Http404 naming the slug — the one helper every view and API uses."""
    return study_by_slug(slug, missing=lambda _known: Http404(f"There is no study {slug!r}."))


def study_slugs() -> str:
    """The slugs of every study, sorted and comma-separated ("" when there is none)."""
    return ", ".join(Study.objects.order_by("slug").values_list("slug", flat=True))


def study_slug_hint(slug: str, known: str) -> str:
    """What an error about the unknown study ``slug`` suggests: the nearest slug, else how a
    study is made."""
    nearest = difflib.get_close_matches(slug, known.split(", ") if known else [], n=1, cutoff=0.6)
    if nearest:
        return f"did you mean '{nearest[0]}'?"
    return "a study is made only with `manage.py create_study SLUG --protocol …`"


def study_by_slug(slug: str, *, missing: Callable[[str], Exception]) -> Study:
    """The study with this slug; without one it raises ``missing(study_slugs())``."""
    study = Study.objects.filter(slug=slug).first()
    if study is None:
        raise missing(study_slugs())
    return study


def study_chosen(slug: str | None) -> Study:
    """What ``--study`` means in a command on one study: that study, or without a slug the only
    one; ``StudyNotChosen`` listing the studies otherwise."""
    if slug:
        return study_by_slug(
            slug,
            missing=lambda known: StudyNotChosen(
                f"No study with slug '{slug}' (existing studies: {known or 'none yet'}); "
                f"{study_slug_hint(slug, known)}"
            ),
        )
    found = list(Study.objects.order_by("slug")[:2])
    if len(found) == 1:
        return found[0]
    if not found:
        raise StudyNotChosen(
            "There is no study yet: create one with `manage.py create_study SLUG --protocol …`."
        )
    raise StudyNotChosen(
        f"There are several studies: choose one with --study (existing studies: {study_slugs()})."
    )


def filter_problem(study: Study, *, t2i_model: str | None, category: str | None) -> tuple[str, str] | None:
    """(field, message) when a T2I model or prompt category matches no image of the study: the
    message names the values that exist. None when every given filter matches."""
    items = Item.objects.filter(study=study)
    if t2i_model and not items.filter(t2i_model=t2i_model).exists():
        known = items.order_by().values_list("t2i_model", flat=True).distinct()
        return "t2i_model", f"No images of T2I model '{t2i_model}' (T2I models: {known_values(known)})."
    if category and not items.filter(prompt__category=category).exists():
        categories = known_values(image_categories(study))
        return "category", f"No images of prompt category '{category}' (categories: {categories})."
    return None


def image_categories(study: Study) -> list[str]:
    """The prompt categories of the study's images (a prompt with no image yet has none), sorted."""
    with_images = study.prompts.filter(Exists(Item.objects.filter(prompt=OuterRef("pk"))))
    return sorted(filter(None, with_images.order_by().values_list("category", flat=True).distinct()))


def known_values(values: Iterable[str]) -> str:
    """Values named in an error message: sorted, once each, "none" without any."""
    return ", ".join(sorted(set(values))) or "none"


def study_questions(study: Study) -> list[Question]:
    """The study's questions in screen order, read once per study object (cached on it)."""
    cached: list[Question] | None = getattr(study, "_questions_cache", None)
    if cached is None:
        cached = list(Question.objects.filter(study_id=study.pk).order_by("position", "id"))
        # A per-object cache the model does not declare (the study object lives one request).
        study._questions_cache = cached  # type: ignore[attr-defined]
    return cached


def item_questions(item: Item, questions: list[Question] | None = None) -> list[Question]:
    """The questions this item asks: those named in ``item.question_keys``, or all of the study's."""
    questions = questions if questions is not None else study_questions(item.study)
    if not item.question_keys:
        return questions
    wanted = set(item.question_keys)
    return [question for question in questions if question.key in wanted]


def _images_prefetch() -> Prefetch:
    return Prefetch("item_images", queryset=ItemImage.objects.select_related("image").order_by("role"))


def with_images(items: QuerySet[_ItemT]) -> QuerySet[_ItemT]:
    """``items`` with their ItemImages and files prefetched (a bounded queryset)."""
    return items.prefetch_related(_images_prefetch())


def images_load(items: Sequence[Item]) -> None:
    """Load the ItemImages and files of ``items`` already read, a chunk at a time."""
    prefetch_in_chunks(items, _images_prefetch())


def item_images(item: Item) -> dict[str, ItemImage]:
    """The item's images by role (uses a prefetch when there is one)."""
    return {link.role: link for link in item.item_images.all()}


def item_main_image(item: Item) -> ItemImage | None:
    """The item's image that stands for it: ``image``, else ``input``, else ``output``."""
    links = item_images(item)
    for role in (ImageRole.IMAGE, ImageRole.INPUT, ImageRole.OUTPUT):
        if role in links:
            return links[role]
    return None


def item_compared_values(item: Item) -> list[tuple[str, str]]:
    """The manifest columns the item's study compares, each with the item's value."""
    spec = PROTOCOLS.get(item.study.protocol)
    if spec is None:
        return []
    parameters = item.study.parameters or {}
    columns = [str(parameters.get(o.name) or "") for o in spec.options if o.column]
    return [(column, _item_column_value(item, column)) for column in columns if column]


def _item_column_value(item: Item, column: str) -> str:
    """The item's value in a manifest column: its own field, its prompt's, or its metadata."""
    prompt = item.prompt
    core = {
        "t2i_model": item.t2i_model,
        "seed": item.seed,
        "index": item.index,
        "word": prompt.word if prompt else None,
        "category": prompt.category if prompt else None,
        "prompt": prompt.text if prompt else None,
    }
    value = core[column] if column in core else (item.metadata or {}).get(column)
    return "" if value is None else str(value)
