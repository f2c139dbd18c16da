"""The researcher's current study, remembered in the session across sections (a page opened
without a study shows it; ``?choose=1`` asks again)."""

from __future__ import annotations

from django.http import HttpRequest

from studies.models import Study

SESSION_KEY = "current_study"


def study_remember(request: HttpRequest, study: Study) -> None:
    """Make ``study`` the current one; the session is written only when it changes."""
    if request.session.get(SESSION_KEY) != study.pk:
        request.session[SESSION_KEY] = study.pk


def study_remembered(request: HttpRequest) -> Study | None:
    """The current study, or None (none yet, or it was deleted since)."""
    pk = request.session.get(SESSION_KEY)
    if not isinstance(pk, int):
        return None
    return Study.objects.filter(pk=pk).first()
