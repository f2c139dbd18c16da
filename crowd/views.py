"""Join links' pages. Participants: the link itself (enrol or continue), the guidelines with the
consent line, the completion page. Researchers: the study's links, a form for a new one (its URL
shown once) and a button to close each, with the participants who came through them."""

from __future__ import annotations

from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache

from annotate.selectors import annotator_progress
from annotate.views.labeling import GUIDELINES_SEEN
from crowd import selectors, services
from crowd.errors import CrowdError, LinkRefused
from crowd.forms import JoinLinkForm
from crowd.models import JoinLink, Participant
from crowd.session import marker_of, marker_set, marker_update
from crowd.throttles import join_throttle_wait
from studies.permissions import researcher_only
from studies.selectors import study_or_404

READ = ("GET", "HEAD")
NO_SESSION = "This page belongs to a study participant's session: open the study link from your panel again."


def _refused(request: HttpRequest, message: str, status: int = 403) -> HttpResponse:
    return render(request, "crowd/refused.html", {"message": message}, status=status)


def _panel_id(request: HttpRequest, link: JoinLink) -> str | None:
    """The participant id the link's first present query parameter carries; None without one."""
    for name in link.param_names:
        value = request.GET.get(name, "").strip()
        if value:
            return value
    return None


@never_cache
def join(request: HttpRequest, token: str) -> HttpResponse:
    """Open a join link: continue as the participant this browser or panel id already is, or
    enrol a new one (rate-limited per address), then go to the guidelines, the labeling screen
    or the completion page."""
    if request.method not in READ:
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    link = selectors.link_by_token(token)
    if link is None:
        return _refused(request, "This study link is not valid. Check that you copied all of it.", status=404)
    panel_id = _panel_id(request, link)
    marker = marker_of(request)
    participant: Participant | None = None
    if marker is not None and marker["study"] == link.study_id:
        participant = Participant.objects.select_related("link", "study").get(pk=marker["participant"])
        if panel_id is not None and panel_id != participant.panel_id:
            participant = None  # another person on this browser
    if participant is None:
        if link.param_names and panel_id is None:
            names = " or ".join(link.param_names)
            return _refused(
                request, f"This study link needs your participant id ({names}); open it from your panel."
            )
        refusal = link.refusal()
        if refusal:
            return _refused(request, refusal, status=410)
        panel_id = panel_id or services.anonymous_panel_id()
        known = Participant.objects.filter(study_id=link.study_id, panel_id=panel_id).exists()
        wait = 0 if known else join_throttle_wait(request)
        if wait:
            return _refused(
                request, f"Too many new participants from your address; try again in {wait} s.", 429
            )
        try:
            participant, _created = services.participant_join(link=link, panel_id=panel_id)
        except LinkRefused as exc:
            return _refused(request, str(exc), status=410)
        participant = Participant.objects.select_related("link", "study", "user").get(pk=participant.pk)
        login(request, participant.user, backend="django.contrib.auth.backends.ModelBackend")
    elif link.refusal() and participant.finished_at is None:
        return _refused(request, link.refusal(), status=410)
    if (
        participant.finished_at is None
        and selectors.items_done(user_id=participant.user_id, study_id=participant.study_id)
        >= participant.link.quota
    ):
        services.participant_finish(participant=participant)
    marker_set(request, participant)
    if participant.finished_at is not None:
        return redirect("crowd:done")
    if participant.consented_at is None:
        return redirect("crowd:guidelines")
    return redirect("annotate:label_study", slug=participant.study.slug)


@never_cache
def guidelines(request: HttpRequest) -> HttpResponse:
    """The study's guidelines with an example image per answer and the consent line; agreeing
    (POST) opens the labeling screen."""
    marker = marker_of(request)
    if marker is None:
        return _refused(request, NO_SESSION)
    participant = Participant.objects.select_related("study", "link").get(pk=marker["participant"])
    if request.method == "POST":
        if request.POST.get("consent") != "yes":
            return render(
                request, "crowd/guidelines.html", _guidelines_context(participant, error=True), status=400
            )
        services.participant_consent(participant=participant)
        marker_update(request, consented=True)
        # The labeling screen would open the same guidelines again on a first visit: seen here.
        seen = request.session.get(GUIDELINES_SEEN, [])
        request.session[GUIDELINES_SEEN] = [*seen, participant.study_id]
        return redirect("annotate:label_study", slug=participant.study.slug)
    if request.method not in READ:
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD, POST"})
    return render(request, "crowd/guidelines.html", _guidelines_context(participant))


def _guidelines_context(participant: Participant, *, error: bool = False) -> dict[str, object]:
    return {
        "study": participant.study,
        "quota": participant.link.quota,
        "questions": selectors.guideline_examples(study=participant.study),
        "error": error,
    }


@never_cache
def done(request: HttpRequest) -> HttpResponse:
    """The completion code, and on to the panel's completion URL."""
    marker = marker_of(request)
    if marker is None:
        return _refused(request, NO_SESSION)
    participant = Participant.objects.select_related("link", "study", "user").get(pk=marker["participant"])
    ran_out = False
    if participant.finished_at is None:
        # Before the quota only when the study has nothing left for them: they are done too.
        if annotator_progress(study=participant.study, annotator=participant.user).remaining:
            return redirect("annotate:label_study", slug=participant.study.slug)
        services.participant_finish(participant=participant)
        marker_update(request, finished=True)
        ran_out = True
    context = {"link": participant.link, "study": participant.study, "ran_out": ran_out}
    return render(request, "crowd/done.html", context)


# --- Researchers ------------------------------------------------------------------------------


@researcher_only(methods=("GET", "HEAD", "POST"))
def links(request: HttpRequest, slug: str) -> HttpResponse:
    """The study's join links and participants; POST makes a new link and shows its URL once."""
    study = study_or_404(slug)
    form = JoinLinkForm(request.POST if request.method == "POST" else None)
    new_url = ""
    error = ""
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                _link, token = services.join_link_create(
                    study=study,
                    quota=data["quota"],
                    completion_url=data["completion_url"],
                    completion_code=data["completion_code"],
                    panel_params=(data["panel_params"] or "").split(","),
                    max_participants=data["max_participants"],
                    expires_at=data["expires_at"],
                    created_by=request.user,
                )
            except CrowdError as exc:
                error, status = str(exc), 400
            else:
                new_url = request.build_absolute_uri(reverse("crowd:join", kwargs={"token": token}))
                form = JoinLinkForm()
        else:
            error, status = " ".join(f"{name}: {e}" for name, errs in form.errors.items() for e in errs), 400
    context = {
        "study": study,
        "form": form,
        "new_url": new_url,
        "error": error,
        "links": selectors.links_of(study=study),
        "participants": selectors.participant_rows(study=study),
    }
    return render(request, "crowd/links.html", context, status=status)


@researcher_only(methods=("POST",))
def link_close(request: HttpRequest, link_id: int) -> HttpResponse:
    """Close one link (it takes no one from now on) and go back to the study's links."""
    link = get_object_or_404(JoinLink.objects.select_related("study"), pk=link_id)
    services.join_link_close(link=link)
    return redirect("crowd:links", slug=link.study.slug)
