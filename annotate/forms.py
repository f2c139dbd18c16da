"""Forms of the labeling and review screens. They check shapes only (types, lengths); whether a
label is allowed, needs a reason, or may still be given is decided by ``annotate.services``."""

from __future__ import annotations

from django import forms

from annotate.models import ImageState

# One hour: a longer "time to label" means the annotator walked away, not that they deliberated.
MAX_DURATION_MS = 60 * 60 * 1000


class LabelSubmitForm(forms.Form):
    """One label for the image on screen, from a key press (JavaScript) or a button (plain HTML)."""

    value = forms.CharField(max_length=50, error_messages={"required": "Choose a label."})
    reason = forms.CharField(max_length=1000, required=False, strip=True)
    request_id = forms.CharField(max_length=64, required=False)
    # Measured in the browser from the image being painted to the key press.
    duration_ms = forms.IntegerField(min_value=0, required=False)
    # Server clock (ms since the epoch) when the image was rendered: the fallback duration
    # when no JavaScript measured one.
    shown_at = forms.IntegerField(min_value=0, required=False)

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
    """A researcher's decision on a disputed image: a label, or "cannot agree"."""

    value = forms.CharField(max_length=50, required=False)
    unresolvable = forms.BooleanField(required=False)
    note = forms.CharField(max_length=2000, required=False, strip=True)

    def clean(self) -> dict:
        data = super().clean()
        if not data.get("value") and not data.get("unresolvable"):
            raise forms.ValidationError("Choose a final label, or 'cannot agree'.")
        return data


class ImageFilterForm(forms.Form):
    """Filters of the images list; choices of model and category come from the study's images."""

    state = forms.ChoiceField(choices=[("", "any state"), *ImageState.choices], required=False)
    t2i_model = forms.ChoiceField(choices=[("", "any model")], required=False, label="T2I model")
    category = forms.ChoiceField(choices=[("", "any category")], required=False)

    def __init__(self, *args, t2i_models: list[str], categories: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["t2i_model"].choices = [("", "any model"), *((m, m) for m in t2i_models)]
        self.fields["category"].choices = [("", "any category"), *((c, c) for c in categories)]


class AgreementFilterForm(forms.Form):
    """Narrow the agreement report to one T2I model or one prompt category."""

    t2i_model = forms.ChoiceField(choices=[("", "all models")], required=False, label="T2I model")
    category = forms.ChoiceField(choices=[("", "all categories")], required=False)

    def __init__(self, *args, t2i_models: list[str], categories: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["t2i_model"].choices = [("", "all models"), *((m, m) for m in t2i_models)]
        self.fields["category"].choices = [("", "all categories"), *((c, c) for c in categories)]
