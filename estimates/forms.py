from __future__ import annotations

from django import forms

from estimates.models import Design


class LabelMoreForm(forms.Form):
    """ "Label N more": the next round's budget and design."""

    budget = forms.IntegerField(min_value=1, label="Label", help_text="How many more images people label.")
    design = forms.ChoiceField(choices=Design.choices, initial=Design.UNIFORM, label="Design")
