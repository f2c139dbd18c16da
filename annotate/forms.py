"""Forms of the labeling and review screens: shapes only; ``annotate.services`` checks answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django import forms

from annotate.models import ItemState
from studies.kinds import kind_of
from studies.models import Question, Study
from studies.selectors import image_categories

# One hour: a longer "time to label" means the annotator walked away, not that they deliberated.
MAX_DURATION_MS = 60 * 60 * 1000
ANSWER_MAX_CHARS = 1000
REASON_MAX_CHARS = 1000


def answer_field(key: str) -> str:
    """The form field that carries the answer to question ``key``."""
    return f"answer_{key}"


def _choice_field(form: forms.BaseForm, name: str) -> forms.ChoiceField:
    """The form's own ChoiceField ``name`` (typed as such)."""
    return cast(forms.ChoiceField, form.fields[name])


def reason_field(key: str) -> str:
    """The form field that carries the reason given with the answer to question ``key``."""
    return f"reason_{key}"


class LabelSubmitForm(forms.Form):
    """The answers (``answer_<key>``, ``reason_<key>``) to every question of the item on screen."""

    request_id = forms.CharField(max_length=64, required=False)
    # Measured in the browser from the item being painted to the submit.
    duration_ms = forms.IntegerField(min_value=0, required=False)
    # Server clock (ms since the epoch) at rendering: the duration when no JavaScript measured one.
    shown_at = forms.IntegerField(min_value=0, required=False)
    # Set when the annotator went back (Z): an explicit change, refused if the labels changed since.
    change = forms.BooleanField(required=False)
    seen_revision = forms.IntegerField(required=False)
    # Legacy single-question fields.
    value = forms.CharField(max_length=ANSWER_MAX_CHARS, required=False)
    reason = forms.CharField(max_length=REASON_MAX_CHARS, required=False, strip=True)

    def __init__(self, data: Mapping[str, Any] | None = None, *, questions: list[Question]) -> None:
        super().__init__(data)
        self.questions = questions
        for question in questions:
            self.fields[answer_field(question.key)] = forms.CharField(
                max_length=ANSWER_MAX_CHARS, required=False, strip=True
            )
            self.fields[reason_field(question.key)] = forms.CharField(
                max_length=REASON_MAX_CHARS, required=False, strip=True
            )

    def clean(self) -> dict[str, Any]:
        # super().clean() fills cleaned_data (and returns it; the stubs allow None).
        super().clean()
        data = self.cleaned_data
        # Nothing chosen where every answer must be: say so before the service is asked.
        optional = any(q.default_value or kind_of(q).empty_allowed for q in self.questions)
        if not self.answers() and not optional:
            noun = "an answer" if len(self.questions) == 1 else "the answers"
            raise forms.ValidationError(f"Choose {noun}.", code="required")
        return data

    def _with_legacy(self, found: dict[str, str], name: str) -> dict[str, str]:
        """``found`` with the legacy field ``name`` (``value``, ``reason``) as the only question's."""
        single = self.questions[0].key if len(self.questions) == 1 else None
        if single is not None and self.cleaned_data.get(name) and single not in found:
            found[single] = self.cleaned_data[name]
        return found

    def answers(self) -> dict[str, str]:
        """``{question key: value}`` for every question answered (an empty answer a kind allows too)."""
        data = self.cleaned_data
        answers: dict[str, str] = {}
        for question in self.questions:
            name = answer_field(question.key)
            value = data.get(name, "")
            if value or (name in self.data and kind_of(question).empty_allowed):
                answers[question.key] = value
        return self._with_legacy(answers, "value")

    def reasons(self) -> dict[str, str]:
        """``{question key: reason}`` for the reasons typed."""
        data = self.cleaned_data
        reasons = {q.key: data[reason_field(q.key)] for q in self.questions if data.get(reason_field(q.key))}
        return self._with_legacy(reasons, "reason")

    def duration(self, now_ms: int) -> int | None:
        """Milliseconds from showing to labeling: the client's figure, else the server's."""
        measured = self.cleaned_data.get("duration_ms")
        if measured is None:
            shown_at = self.cleaned_data.get("shown_at")
            measured = now_ms - shown_at if shown_at else None
        if measured is None or measured < 0:
            return None
        return min(measured, MAX_DURATION_MS)


class DisputeResolveForm(forms.Form):
    """A researcher's decision on one disputed (item, question): an answer, or "cannot agree"."""

    question = forms.SlugField(max_length=50, required=False)
    value = forms.CharField(max_length=ANSWER_MAX_CHARS, required=False)
    unresolvable = forms.BooleanField(required=False)
    note = forms.CharField(max_length=2000, required=False, strip=True)

    def clean(self) -> dict[str, Any]:
        # super().clean() fills cleaned_data (and returns it; the stubs allow None).
        super().clean()
        data = self.cleaned_data
        if not data.get("value") and not data.get("unresolvable"):
            raise forms.ValidationError("Choose a final answer, or 'cannot agree'.")
        return data


class _StudyFilterForm(forms.Form):
    """Filters by T2I model and prompt category, with those of the study's images as choices (the
    filter check refuses a category no image has)."""

    blanks = ("any model", "any category")
    t2i_model = forms.ChoiceField(required=False, label="T2I model")
    category = forms.ChoiceField(required=False)

    def __init__(self, data: Mapping[str, Any] | None, *, study: Study) -> None:
        super().__init__(data)
        models = study.items.order_by().values_list("t2i_model", flat=True).distinct()
        for name, values, blank in zip(
            ("t2i_model", "category"), (models, image_categories(study)), self.blanks, strict=True
        ):
            _choice_field(self, name).choices = [("", blank), *((v, v) for v in sorted(filter(None, values)))]


# Sort orders of the items list: form value → (what the menu says, ORDER BY).
ITEM_SORTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "id": ("imported first", ("id",)),
    "-id": ("imported last", ("-id",)),
    "key": ("key A→Z", ("key", "id")),
    "-key": ("key Z→A", ("-key", "id")),
    "state": ("state", ("state", "id")),
    "t2i_model": ("T2I model", ("t2i_model", "id")),
    "category": ("category", ("prompt__category", "prompt__word", "id")),
}


class ItemFilterForm(_StudyFilterForm):
    """Filters of the items list."""

    state = forms.ChoiceField(choices=[("", "any state"), *ItemState.choices], required=False)
    q = forms.CharField(max_length=200, required=False, label="Search", strip=True)
    sort = forms.ChoiceField(choices=[(key, name) for key, (name, _) in ITEM_SORTS.items()], required=False)


class AgreementFilterForm(_StudyFilterForm):
    """Pick the question, and narrow the agreement report to one T2I model or prompt category."""

    blanks = ("all models", "all categories")
    question = forms.ChoiceField(choices=[], required=False)

    def __init__(self, data: Mapping[str, Any] | None, *, study: Study, questions: list[Question]) -> None:
        super().__init__(data, study=study)
        _choice_field(self, "question").choices = [(q.key, f"{q.key} — {q.text}") for q in questions]


class AnnotatorsAddForm(forms.Form):
    """The study page's "add annotators": usernames separated by spaces, commas or lines."""

    usernames = forms.CharField(max_length=20_000, widget=forms.Textarea(attrs={"rows": 3}))
    allow_staff = forms.BooleanField(required=False, label="Also researchers and admins")

    def names(self) -> list[str]:
        return str(self.cleaned_data["usernames"]).replace(",", " ").split()
