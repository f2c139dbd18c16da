"""What the endpoints share: permissions, errors, the study a request may see, checks, messages."""

from __future__ import annotations

from typing import Any, NoReturn

from django.db.models import QuerySet
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from annotate import errors, selectors
from config.api import QueryInput, conflict, invalid, not_found
from studies import permissions
from studies.models import Item, Question, Study
from studies.selectors import filter_problem, item_questions, study_questions


class IsAnnotator(BasePermission):
    message = "Only annotators may use this endpoint."

    def has_permission(self, request: Request, view: Any) -> bool:
        return permissions.is_annotator(request.user)


def require_role(user: Any) -> None:
    if not (permissions.is_researcher(user) or permissions.is_annotator(user)):
        raise PermissionDenied("You have no role in BiasLab yet; ask an admin.")


def item_or_404(items: QuerySet[Item], pk: int) -> Item:
    item = items.filter(pk=pk).first()
    if item is None:
        raise not_found(f"No item {pk}.")
    return item


def raise_for(exc: errors.AnnotateError) -> NoReturn:
    """Turn a domain error into the HTTP answer a client can act on."""
    message = str(exc)
    if isinstance(exc, errors.NotAssigned):
        raise PermissionDenied(message) from exc
    if isinstance(exc, errors.NothingToUndo):
        raise not_found(message) from exc
    if isinstance(exc, errors.AlreadyResolved | errors.ItemFull | errors.NotDisputed | errors.StaleSubmit):
        raise conflict(message) from exc
    if isinstance(exc, errors.InvalidLabel):
        raise invalid(message, code="invalid_answer") from exc
    raise invalid(message, code="invalid") from exc


def check_filters(*, study: Study, t2i_model: str | None, category: str | None) -> None:
    """A typo in a filter gets a 400 naming what exists, not an empty answer."""
    problem = filter_problem(study, t2i_model=t2i_model, category=category)
    if problem:
        field, message = problem
        raise invalid(message, code="unknown_filter", field=field)


def studies_visible_to(user: Any) -> QuerySet[Study]:
    if permissions.is_researcher(user):
        return Study.objects.order_by("name")
    return selectors.studies_for_annotator(user=user)


def query_with_study(request: Request, query: type[QueryInput]) -> tuple[dict[str, Any], Study]:
    """The validated ``?study=&…`` parameters and the study they name (400 without one, 404 unseen)."""
    if "study" not in request.query_params:
        known = ", ".join(studies_visible_to(request.user).values_list("slug", flat=True)) or "none yet"
        raise ValidationError({"study": [f"Give the study as ?study=<slug> (existing studies: {known})."]})
    params = query.parse(request)
    return params, visible_study(request.user, params["study"])


def visible_study(user: Any, slug: str) -> Study:
    """The study by slug for a researcher, or for an annotator on it; 404 for anyone else."""
    study = studies_visible_to(user).filter(slug=slug).first()
    if study is None:
        raise not_found(f"There is no study '{slug}' you may see.")
    return study


def question_of(item: Item, key: str | None) -> Question:
    """The question ``key`` of the item, else its only question; 400 naming its questions otherwise."""
    asked = item_questions(item, study_questions(item.study))
    if key:
        for question in asked:
            if question.key == key:
                return question
        raise invalid(
            f"Item {item.pk} does not ask the question '{key}' (it asks: {', '.join(q.key for q in asked)}).",
            code="unknown_question",
            field="question",
        )
    if len(asked) == 1:
        return asked[0]
    raise invalid(
        f"Item {item.pk} asks several questions: name one as 'question' ({', '.join(q.key for q in asked)}).",
        code="question_required",
        field="question",
    )


# Sentences of the errors the endpoints answer (the schema shows them next to each status).
NO_ROLE = "Not logged in, or no role in BiasLab."
RESEARCHERS_ONLY = "Not logged in, or not a researcher or admin."
UNKNOWN_ITEM = "No item with this id."
BAD_STUDY_QUERY = (
    "?study= is missing, empty or given twice, or a filter is not among the study's values "
    "(code unknown_filter, naming the values that exist)."
)
UNKNOWN_STUDY = "No study with this slug that you may see."
