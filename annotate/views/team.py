"""The annotators of a study (their stats, adding them), and the page of users without a role."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from accounts.selectors import password_set_days, password_set_path
from annotate import selectors
from annotate.forms import AnnotatorsAddForm
from annotate.views.common import READ, WRITE, choose_study
from studies import services as study_services
from studies.errors import DomainError, StaffRefused
from studies.permissions import guarded, researcher_only
from studies.selectors import study_or_404
from studies.typing import AuthenticatedHttpRequest


@researcher_only(methods=READ)
def annotator_stats(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    study = choose_study(request, slug, "annotate:annotator_stats")
    if isinstance(study, HttpResponse):
        return study
    stats = selectors.annotator_stats(study=study)
    context = {"study": study, "stats": stats, "team_form": AnnotatorsAddForm()}
    return render(request, "annotate/annotator_stats.html", context)


@never_cache
@researcher_only(methods=WRITE)
def annotators_add(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """The annotators page's form: add annotators, then show each new account's password link."""
    study = study_or_404(slug)
    form = AnnotatorsAddForm(request.POST)
    context: dict[str, Any] = {"study": study, "team_form": form, "team_error": ""}
    if not form.is_valid():
        context["team_error"] = "Name at least one username (at most 20,000 characters in all)."
    else:
        try:
            done = study_services.annotators_add(
                study=study, usernames=form.names(), allow_staff=form.cleaned_data["allow_staff"]
            )
        except StaffRefused as exc:
            context["team_error"] = f"{exc} (tick “Also researchers and admins” to add them)"
        except DomainError as exc:
            context["team_error"] = str(exc)
        else:
            context["team_done"] = {
                "created": [
                    (u.get_username(), request.build_absolute_uri(password_set_path(u))) for u in done.created
                ],
                "added": [u.get_username() for u in done.added],
                "unchanged": list(done.unchanged),
                "days": password_set_days(),
            }
            context["team_form"] = AnnotatorsAddForm()
    status = 400 if context["team_error"] else 200
    if request.htmx:
        return render(request, "annotate/annotator_stats.html#team_form", context, status=status)
    context |= {"stats": selectors.annotator_stats(study=study), "section": "annotator_stats"}
    return render(request, "annotate/annotator_stats.html", context, status=status)


# --- Users without a role ---------------------------------------------------------------------


@guarded(methods=READ, check=lambda request, **kwargs: True)
def no_role(request: HttpRequest) -> HttpResponse:
    return render(request, "annotate/no_role.html")
