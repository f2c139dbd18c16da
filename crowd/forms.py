"""The researcher's form for a new join link (shapes only; the service checks the rest)."""

from __future__ import annotations

from django import forms


class JoinLinkForm(forms.Form):
    quota = forms.IntegerField(min_value=1, initial=40, help_text="Items per participant (gold included).")
    completion_url = forms.CharField(
        max_length=1000, help_text="http(s) URL the participant is sent to at the end."
    )
    completion_code = forms.CharField(max_length=200, help_text="Code shown to the participant at the end.")
    panel_params = forms.CharField(
        max_length=500,
        required=False,
        initial="PROLIFIC_PID",
        help_text="Query parameters carrying the panel's participant id, comma-separated (empty: none).",
    )
    max_participants = forms.IntegerField(min_value=1, required=False, help_text="Empty: no cap.")
    expires_at = forms.DateTimeField(required=False, help_text="YYYY-MM-DD HH:MM; empty: never.")
