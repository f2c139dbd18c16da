"""The toy protocol's one page: the report's final counts as JSON."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from reports.analyses import analysis_of
from reports.selectors import Scope
from studies.models import Study
from studies.permissions import researcher_only


@researcher_only()
def counts(request: HttpRequest) -> JsonResponse:
    study = Study.objects.get(slug=request.GET["study"])
    return JsonResponse(analysis_of(study).build(Scope(study))["final"])
