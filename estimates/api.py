"""REST API of the estimates app, for researchers: sampling rounds and the prediction-powered estimate."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from config.api import (
    AuthenticatedRequest,
    QueryInput,
    ResearcherApi,
    StrictCharField,
    StrictInput,
    StrictIntegerField,
    StrictSlugField,
    error_responses,
    invalid,
    not_found,
)
from estimates import estimands
from estimates import selectors as sel
from estimates.models import Design, EstimateJob
from estimates.services import (
    MAX_SEED,
    SamplingError,
    estimate_request,
    estimate_worker_ensure,
    sampling_round_create,
)
from studies.models import Study
from studies.selectors import study_by_slug

RESEARCHERS_ONLY = "Logged in, but not a researcher or admin."
UNKNOWN_STUDY = "No study with this slug."
#: Bootstrap replicates an API caller may ask for (the command allows any; a request must stay short).
MAX_BOOTSTRAP = 2000


def _responses(ok: dict[int, Any], errors: dict[int, str]) -> dict[int, Any]:
    """``extend_schema`` responses: ``ok``, the described ``errors`` and 403 for non-researchers."""
    return {**ok, **error_responses({**errors, 403: RESEARCHERS_ONLY})}


def _study(slug: str, *, field: str | None = None) -> Study:
    """The study by slug: in a query, 404; in a body (``field``), a 400 naming the field."""
    if field is None:
        return study_by_slug(slug, missing=lambda _known: not_found(f"There is no study '{slug}'."))
    return study_by_slug(
        slug,
        missing=lambda known: invalid(
            f"There is no study '{slug}' (studies: {known or 'none yet'}).", code="unknown_study", field=field
        ),
    )


def _estimable(study: Study) -> None:
    """A 400 unless the study's protocol has a few-label estimate (``estimates.estimands``)."""
    if estimands.for_protocol(study.protocol) is None:
        raise invalid(f"{estimands.not_estimable(study)}.", code="not_estimable", field="study")


# --- Serializers ----------------------------------------------------------------------------------


class RoundQuery(QueryInput):
    study = serializers.SlugField(help_text="The study's slug.")


class RoundInput(StrictInput):
    study = StrictSlugField(help_text="The study's slug (a study whose protocol has a few-label estimate).")
    detector = StrictCharField(max_length=100, help_text="Detector key; its last-run version sets π.")
    budget = StrictIntegerField(
        min_value=1, max_value=10**9, help_text="Labels asked for (Σπ over the pool)."
    )
    design = serializers.ChoiceField(
        choices=Design.choices, default=Design.UNIFORM, help_text="How π is chosen."
    )
    seed = StrictIntegerField(
        min_value=0, max_value=MAX_SEED, required=False, help_text="Seed of the draw (random if left out)."
    )


class RoundOutput(serializers.Serializer):
    id = serializers.IntegerField()
    study = serializers.CharField(source="study.slug")
    number = serializers.IntegerField(help_text="1, 2, … within the study.")
    detector = serializers.CharField()
    detector_version = serializers.CharField()
    design = serializers.ChoiceField(choices=Design.choices)
    seed = serializers.IntegerField()
    budget = serializers.IntegerField()
    n_selected = serializers.IntegerField(
        help_text="Images the draw selected, including those whose final label already existed (π = 1)."
    )
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)


class EstimateQuery(QueryInput):
    study = serializers.SlugField(
        help_text="The study's slug (a study whose protocol has a few-label estimate)."
    )
    detector = serializers.CharField(max_length=100, help_text="Detector key; its last-run version is used.")
    bootstrap = serializers.IntegerField(
        min_value=0, max_value=MAX_BOOTSTRAP, default=1000, help_text="Design-bootstrap replicates."
    )
    seed = serializers.IntegerField(
        min_value=0, max_value=MAX_SEED, default=0, help_text="Seed of the bootstrap."
    )


class _IntervalOutput(serializers.Serializer):
    estimate = serializers.FloatField(allow_null=True)
    ci95 = serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2, allow_null=True)


class ScoreOutput(_IntervalOutput):
    bias_corrected = serializers.FloatField(allow_null=True)


class PromptEstimateOutput(_IntervalOutput):
    n_images = serializers.IntegerField()
    n_labelled = serializers.IntegerField()


class PendingOutput(serializers.Serializer):
    round = serializers.IntegerField()
    pending_images = serializers.IntegerField()
    waiting_for_labels = serializers.IntegerField(help_text="Of these, the images that wait for labels.")
    waiting_for_dispute = serializers.IntegerField(
        help_text="Of these, the disputed images: labelled, they wait for a researcher to settle the dispute."
    )
    images = serializers.ListField(child=serializers.CharField(), help_text="The first few image names.")


class ModelEstimateOutput(serializers.Serializer):
    """The estimate's JSON contract for one T2I model; undefined figures are null."""

    model_bias_score = ScoreOutput(help_text="Prediction-powered estimate of the human bias score.")
    human_only = ScoreOutput(help_text="Horvitz-Thompson on the human sample alone.")
    detector_only = serializers.FloatField(allow_null=True, help_text="Eq. 1 on the detector's verdicts.")
    # ``lambda`` is a Python keyword: declared below under its JSON name.
    effective_labels = serializers.FloatField(
        allow_null=True,
        help_text="Labels alone would need this many labels for the estimate's variance: labels x "
        "labels-only variance / this estimator's variance. Null before the first complete round.",
    )
    n_images = serializers.IntegerField()
    n_labelled = serializers.IntegerField()
    rounds = serializers.IntegerField(help_text="Complete rounds the estimate uses.")
    prompts = serializers.DictField(child=PromptEstimateOutput())
    labels_for_half_width = serializers.IntegerField(allow_null=True)
    warnings = serializers.ListField(child=serializers.CharField())
    pending = PendingOutput(many=True)


ModelEstimateOutput._declared_fields["lambda"] = serializers.FloatField(
    allow_null=True,
    min_value=0.0,
    max_value=1.0,
    help_text="The detector's weight (power tuning, cross-fitted): 0 is labels alone, 1 the detector's "
    "full weight. Null before the first complete round.",
)


class EstimateOutput(serializers.Serializer):
    study = serializers.CharField()
    detector = serializers.CharField()
    version = serializers.CharField(help_text="The detector version estimated from.")
    models = serializers.DictField(
        child=ModelEstimateOutput(),
        required=False,
        help_text="The model bias score's studies: keyed by T2I model.",
    )
    attributes = serializers.JSONField(
        required=False,
        help_text="Attributes studies: {model: {setting: {gep_score, gep_vector {key}, n_items, n_labelled}}}, "
        "each estimand {estimate, ci95, human_only {estimate, ci95}, detector_only, lambda, effective_labels}.",
    )
    pair_change = serializers.JSONField(
        required=False,
        help_text="Pair-change studies: {model: {domain: {attribute: estimand + n_items, n_labelled}}}.",
    )
    questions = serializers.JSONField(
        required=False,
        help_text="Questions studies: {question: {model: {groups: {group: {shares: {answer: estimand}, "
        "n_items, n_labelled}}, max_gap: {answer: estimand}, n_items, n_labelled}}}.",
    )
    rounds = serializers.ListField(child=serializers.IntegerField(), required=False)
    warnings = serializers.ListField(child=serializers.CharField(), required=False)
    pending = serializers.JSONField(required=False)
    computed_at = serializers.DateTimeField(help_text="When the estimate worker computed this estimate.")


class JobOutput(serializers.Serializer):
    """An estimate job: what a 202 from ``/api/estimates/`` and its ``status_url`` answer."""

    id = serializers.IntegerField()
    study = serializers.CharField(source="study.slug")
    detector = serializers.CharField()
    status = serializers.ChoiceField(
        choices=["queued", "running", "done", "failed"],
        help_text="queued: waits for the worker; running: being computed; done: GET result_url; failed: see error.",
    )
    attempts = serializers.IntegerField(
        help_text="Times a worker started it (a dead worker's job is retried)."
    )
    error = serializers.CharField(help_text="Why it failed; empty otherwise.")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    heartbeat_at = serializers.DateTimeField(allow_null=True, help_text="The worker's last sign of life.")
    finished_at = serializers.DateTimeField(allow_null=True)
    status_url = serializers.SerializerMethodField(help_text="This job's status (poll it).")
    result_url = serializers.SerializerMethodField(
        help_text="The estimate: 200 with the result once done (202 again if the data changed meanwhile)."
    )

    def get_status_url(self, job: EstimateJob) -> str:
        return reverse("api-estimate-job", args=[job.pk], request=self.context.get("request"))

    def get_result_url(self, job: EstimateJob) -> str:
        base = reverse("api-estimates", request=self.context.get("request"))
        return f"{base}?study={job.study.slug}&detector={job.detector}&bootstrap={job.n_boot}&seed={job.seed}"


# --- Views ----------------------------------------------------------------------------------------


class SamplingRoundListApi(ResearcherApi):
    """Sampling rounds of a study (GET) and drawing the next one (POST)."""

    @extend_schema(
        operation_id="sampling_rounds_list",
        tags=["estimates"],
        parameters=[RoundQuery],
        responses=_responses(
            {200: RoundOutput(many=True)}, {400: "?study= missing or given twice.", 404: UNKNOWN_STUDY}
        ),
    )
    def get(self, request: Request) -> Response:
        study = _study(RoundQuery.parse(request)["study"])
        return Response(RoundOutput(sel.rounds_of_study(study), many=True).data)

    @extend_schema(
        operation_id="sampling_rounds_create",
        tags=["estimates"],
        request=RoundInput,
        examples=[
            OpenApiExample(
                "200 more labels, uniform",
                value={"study": "demo", "detector": "clip", "budget": 200, "seed": 7},
                request_only=True,
            )
        ],
        responses=_responses(
            {201: RoundOutput},
            {
                400: "Invalid body; or a study that does not exist or whose protocol has no few-label estimate, a "
                "detector without predictions in it, a budget larger than the unlabelled pool, "
                "a round still waiting for labels, active without an earlier round (codes "
                "unknown_study, not_estimable, unknown_detector, sampling_refused; "
                "`errors` names the field)."
            },
        ),
    )
    def post(self, request: AuthenticatedRequest) -> Response:
        data = RoundInput(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        study = _study(body["study"], field="study")
        _estimable(study)
        try:
            created = sampling_round_create(
                study=study,
                detector=body["detector"],
                budget=body["budget"],
                design=body["design"],
                seed=body.get("seed"),
                user=request.user,
            )
        except SamplingError as error:
            code = {"study": "not_estimable", "detector": "unknown_detector"}.get(
                error.field, "sampling_refused"
            )
            raise invalid(str(error), code=code, field=error.field) from None
        return Response(RoundOutput(created).data, status=status.HTTP_201_CREATED)


class EstimateApi(ResearcherApi):
    """``estimate_bias --format json`` as the worker kept it; 202 with its job when the data changed since."""

    @extend_schema(
        operation_id="estimates_retrieve",
        tags=["estimates"],
        parameters=[EstimateQuery],
        responses=_responses(
            {200: EstimateOutput, 202: JobOutput},
            {
                400: "A parameter missing, malformed or given twice; a study whose protocol has no "
                "few-label estimate or a detector without predictions in it (codes not_estimable, "
                "unknown_detector).",
                404: UNKNOWN_STUDY,
            },
        ),
    )
    def get(self, request: Request) -> Response:
        params = EstimateQuery.parse(request)
        study = _study(params["study"])
        _estimable(study)
        try:
            asked = estimate_request(
                study=study,
                detector=params["detector"],
                n_boot=params["bootstrap"],
                seed=params["seed"],
                history=False,
            )
        except LookupError as error:
            raise invalid(f"{error}.", code="unknown_detector", field="detector") from None
        if asked.current and asked.kept is not None:
            body = {
                "study": study.slug,
                **asked.kept.report.api_json(),
                "computed_at": asked.kept.computed_at,
            }
            return Response(EstimateOutput(body).data)
        assert asked.job is not None
        job = JobOutput(
            EstimateJob.objects.select_related("study").get(pk=asked.job.pk), context={"request": request}
        )
        return Response(
            job.data, status=status.HTTP_202_ACCEPTED, headers={"Location": job.data["status_url"]}
        )


class EstimateJobApi(ResearcherApi):
    """The status of an estimate job (the ``status_url`` of a 202 from ``/api/estimates/``)."""

    @extend_schema(
        operation_id="estimate_jobs_retrieve",
        tags=["estimates"],
        responses=_responses(
            {200: JobOutput}, {404: "No such job (a newer one of the same estimate replaced it)."}
        ),
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = sel.estimate_job(job_id)
        if job is None:
            raise not_found(
                f"There is no estimate job {job_id} (a newer one replaced it: ask the estimate again)."
            )
        if job.status == "queued":
            estimate_worker_ensure()
        return Response(JobOutput(job, context={"request": request}).data)
