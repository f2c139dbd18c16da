"""What every endpoint under ``/api/`` shares: one JSON error shape, strict input, the base view, typed ids,
and how the OpenAPI 3 schema (drf-spectacular) documents them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.urls import register_converter
from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from config.parsers import BoundedJSONParser
from studies.permissions import IsResearcher

if TYPE_CHECKING:
    from django.contrib.auth.models import User

API_PREFIX = "/api/"
#: The largest id a path accepts: a 64-bit signed primary key (SQLite and PostgreSQL bigint).
MAX_ID = 2**63 - 1

# --- Errors -------------------------------------------------------------------------------------


class ErrorOutput(serializers.Serializer):
    """The body of every error answer under /api/."""

    status = serializers.IntegerField(help_text="The HTTP status code, repeated for clients that lose it.")
    code = serializers.CharField(
        help_text="Machine-readable reason: invalid, parse_error, not_authenticated, "
        "authentication_failed, permission_denied, not_found, method_not_allowed, not_acceptable, "
        "unsupported_media_type, conflict, throttled, server_error, or a rule that depends on the "
        "study's data: invalid_answer, unknown_question, question_required, unknown_filter, "
        "no_questions, invalid_credentials."
    )
    detail = serializers.CharField(help_text="What went wrong, in a sentence meant for a person.")
    # DRF's serializer metaclass takes declared fields out of the class, so this field does not
    # shadow Serializer.errors at run time; the stubs cannot express that.
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Per input field (dotted path for nested ones; non_field_errors for the body as "
        "a whole), its messages. Empty for errors that are not about one input.",
    )


class ApiError(exceptions.APIException):
    """A domain error with its own status and code; ``field`` names the input it is about."""

    def __init__(self, detail: str, *, status_code: int, code: str, field: str | None = None) -> None:
        super().__init__(detail, code)
        self.status_code = status_code
        self.field = field


def invalid(detail: str, *, code: str, field: str | None = None) -> ApiError:
    """A 400 whose cause the schema cannot state (it depends on the study's data)."""
    return ApiError(detail, status_code=status.HTTP_400_BAD_REQUEST, code=code, field=field)


def not_found(detail: str) -> ApiError:
    return ApiError(detail, status_code=status.HTTP_404_NOT_FOUND, code="not_found")


def conflict(detail: str) -> ApiError:
    return ApiError(detail, status_code=status.HTTP_409_CONFLICT, code="conflict")


def error_body(
    status_code: int, code: str, detail: str, errors: Mapping[str, list[str]] | None = None
) -> dict:
    """The one error shape (see ``ErrorOutput``)."""
    return {"status": status_code, "code": code, "detail": detail, "errors": dict(errors or {})}


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """A serializer's nested error detail → {dotted field path: [messages]}."""
    if isinstance(detail, Mapping):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(detail, list | tuple):
        if all(not isinstance(value, Mapping | list | tuple) for value in detail):
            return {prefix or api_settings.NON_FIELD_ERRORS_KEY: [str(value) for value in detail]}
        flat = {}
        for index, value in enumerate(detail):
            flat.update(_flatten(value, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    return {prefix or api_settings.NON_FIELD_ERRORS_KEY: [str(detail)]}


def _sentence(errors: Mapping[str, list[str]]) -> str:
    parts = []
    for field, messages in errors.items():
        text = " ".join(messages)
        parts.append(text if field == api_settings.NON_FIELD_ERRORS_KEY else f"{field}: {text}")
    return " ".join(parts) or "Invalid input."


#: DRF's code for "these credentials do not log in" (AuthTokenSerializer, accounts.api), by the
#: name the schema documents.
_CODE_NAMES = {"authorization": "invalid_credentials"}


def _validation_code(exc: exceptions.ValidationError) -> str:
    """``invalid``, unless the error is about the body as a whole with one specific code."""
    codes = exc.get_codes()
    if isinstance(codes, Mapping) and set(codes) == {api_settings.NON_FIELD_ERRORS_KEY}:
        codes = codes[api_settings.NON_FIELD_ERRORS_KEY]
    if isinstance(codes, list) and len(set(map(str, codes))) == 1 and isinstance(codes[0], str):
        return _CODE_NAMES.get(codes[0], codes[0])
    return "invalid"


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> HttpResponseBase | None:
    """DRF's handler (status, headers, rollback), answered in the one JSON shape."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    response = drf_exception_handler(exc, dict(context))
    if response is None or not isinstance(exc, exceptions.APIException):
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail)
        return _error_response(
            error_body(exc.status_code, _validation_code(exc), _sentence(errors), errors), response
        )
    code = exc.get_codes()
    code = code if isinstance(code, str) else exc.default_code
    errors = {exc.field: [str(exc.detail)]} if isinstance(exc, ApiError) and exc.field else {}
    return _error_response(error_body(exc.status_code, code, str(exc.detail), errors), response)


def _error_response(body: dict, source: Mapping[str, str] | HttpResponseBase) -> JsonResponse:
    """An ``error_body`` answered with its status and the headers of ``source`` a client acts on."""
    answer = JsonResponse(body, status=body["status"], json_dumps_params={"ensure_ascii": False})
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in source:
            answer[header] = source[header]
    return answer


_STATUS_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def _allowed_methods(view_class: type[APIView]) -> list[str]:
    methods = [m.upper() for m in view_class.http_method_names if hasattr(view_class, m)]
    if "GET" in methods and "HEAD" not in methods:
        methods.append("HEAD")  # Django's View.setup answers HEAD with GET
    return methods


class ApiErrorMiddleware:
    """The API's answers that no DRF view shapes: 405 before anything else, and JSON for the
    errors Django answers itself (no URL matches — an id that is not a number —, a server
    error, a bad Host header), in DEBUG too, where Django would show its technical pages."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if (
            request.path.startswith(API_PREFIX)
            and response.status_code >= 400
            and not response.streaming
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return self._json(request, response)
        return response

    def process_view(
        self, request: HttpRequest, view_func: Callable, view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        """405 with ``Allow`` for a method the API view does not have, before it authenticates."""
        view_class = getattr(view_func, "cls", None)
        if not request.path.startswith(API_PREFIX) or not (
            isinstance(view_class, type) and issubclass(view_class, APIView)
        ):
            return None
        allowed = _allowed_methods(view_class)
        if request.method in allowed:
            return None
        hints: Mapping[str, str] = getattr(view_class, "method_hints", {})
        detail = hints.get(request.method or "", f'Method "{request.method}" not allowed.')
        return _error_response(error_body(405, "method_not_allowed", detail), {"Allow": ", ".join(allowed)})

    def _json(self, request: HttpRequest, response: HttpResponseBase) -> JsonResponse:
        code = response.status_code
        if code == 404:
            detail = (
                f"No API endpoint at {request.path}: ids are whole numbers from 1, and every "
                f"endpoint is listed in the schema at {API_PREFIX}schema/."
            )
        elif code >= 500:
            detail = "Server error. It has been logged; please report what you were doing."
        else:
            detail = response.reason_phrase
        name = _STATUS_CODES.get(code, "server_error" if code >= 500 else "error")
        return _error_response(error_body(code, name, detail), response)


# --- Ids in paths -------------------------------------------------------------------------------


class IdConverter:
    """``<id:pk>``: a primary key, 1 … 2**63-1. Anything else is no match (a JSON 404), never a
    database error: ``<int:pk>`` takes any run of digits, and SQLite overflows on the lookup."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= MAX_ID:
            raise ValueError(value)
        return number

    def to_url(self, value: int) -> str:
        return str(value)


# The schema shows it as SPECTACULAR_SETTINGS["PATH_CONVERTER_OVERRIDES"]["id"] says.
register_converter(IdConverter, "id")


# --- Strict input -------------------------------------------------------------------------------


class StrictCharField(serializers.CharField):
    """A string, and only a string: DRF's CharField would store the number 3 as "3". Not
    trimmed: the services clean what they store, and "  " must not turn into a "blank" 400
    that the schema (minLength) cannot announce."""

    default_error_messages = {"not_a_string": "Must be a string, not {kind}."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_a_string", kind=_kind(data))
        return super().to_internal_value(data)


class StrictSlugField(StrictCharField, serializers.SlugField):
    """A slug given as a JSON string."""


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: not "3", not 3.0, not true."""

    default_error_messages = {"not_an_integer": "Must be an integer, not {kind}."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_an_integer", kind=_kind(data))
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false: not "true", not 1."""

    default_error_messages = {"not_a_boolean": "Must be true or false, not {kind}."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("not_a_boolean", kind=_kind(data))
        return data


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}.get(
        type(value), "an object"
    )


class StrictInput(serializers.Serializer):
    """A JSON request body: strict fields, and a field the endpoint does not take is an error
    (a client that misspells ``reason`` learns it, instead of losing the reason)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, Mapping) else []
        errors: dict[str, Any] = {}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors = dict(exc.detail) if isinstance(exc.detail, Mapping) else {"non_field_errors": exc.detail}
        for name in unknown:
            errors[name] = [f"Unknown field: this endpoint takes {', '.join(self.fields)}."]
        if errors:
            raise serializers.ValidationError(errors)
        return value


class QueryInput(serializers.Serializer):
    """Query parameters: each at most once, and empty only where a field allows blank text."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        errors: dict[str, list[str]] = {}
        for name, field in self.fields.items():
            values = (
                data.getlist(name) if hasattr(data, "getlist") else ([data[name]] if name in data else [])
            )
            if len(values) > 1:
                errors[name] = ["Give this parameter once."]
            elif values and values[0] == "" and not getattr(field, "allow_blank", False):
                errors[name] = ["May not be empty."]
        if errors:
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)

    @classmethod
    def parse(cls, request: Request) -> dict[str, Any]:
        """The validated parameters of ``request``; a 400 naming each bad one otherwise."""
        query = cls(data=request.query_params)
        query.is_valid(raise_exception=True)
        return dict(query.validated_data)


# --- Pages --------------------------------------------------------------------------------------

_PAGE = re.compile(r"[1-9][0-9]{0,17}")


class StrictPageNumberPagination(PageNumberPagination):
    """DRF's page numbers, except that ``?page=`` must be a whole number from 1 (DRF reads an
    empty one as page 1 and ``last`` as the last page). A page past the end is still 404."""

    def get_page_number(self, request: Request, paginator: Any) -> int:
        values = request.query_params.getlist(self.page_query_param)
        if not values:
            return 1
        if len(values) > 1 or not _PAGE.fullmatch(values[0]):
            raise serializers.ValidationError({self.page_query_param: ["A whole number from 1, given once."]})
        return int(values[0])

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        (page,) = super().get_schema_operation_parameters(view)
        page["description"] = "Page number, from 1 (a page past the last one is 404)."
        page["schema"] |= {"minimum": 1, "maximum": 10**18 - 1}
        return [page]


# --- Base view ----------------------------------------------------------------------------------


class AuthenticatedRequest(Request):
    """The request of a view whose ``permission_classes`` start with ``IsAuthenticated``: its user
    is signed in. A type only (DRF never makes one): views annotate their request with it."""

    user: User


class ApiView(APIView):
    """Base of BiasLab's API views: JSON bodies only (a form post is 415), and pages. ``method_hints``: for a
    method the endpoint deliberately lacks, the sentence its 405 gives (what to do instead);
    ``ApiErrorMiddleware`` answers it."""

    parser_classes = [BoundedJSONParser]
    #: Set on the views that page their rows (the schema reads it to document the page shape).
    pagination_class: type[StrictPageNumberPagination] | None = None
    method_hints: ClassVar[dict[str, str]] = {}

    def paginated(self, rows: Any, serialize: Callable[[list[Any]], Any]) -> Any:
        """One page of ``rows`` as ``{count, next, previous, results}``; ``serialize`` turns the
        page's rows into JSON data."""
        assert self.pagination_class is not None, "set pagination_class on a paginated view"
        paginator = self.pagination_class()
        page: list[Any] | None = paginator.paginate_queryset(rows, self.request, view=self)
        assert page is not None, "the pagination class sets a page size, so there is always a page"
        return paginator.get_paginated_response(serialize(page))


# --- Schema -------------------------------------------------------------------------------------


class ResearcherApi(ApiView):
    """An endpoint for researchers and admins only (403 for anyone else)."""

    permission_classes = [IsAuthenticated, IsResearcher]


_GENERIC_ERRORS = {
    400: "The input is invalid: see `errors` for each field.",
    401: "Not logged in: no session and no valid token (see WWW-Authenticate).",
    403: "Your role may not use this endpoint, or a session request lacks its CSRF token.",
    404: "Nothing with this id exists for you, or the page is past the last one.",
    406: "None of the formats the Accept header asks for is available.",
    415: "The body's Content-Type is not one this endpoint takes (send application/json).",
    429: "Too many requests: wait the seconds in Retry-After.",
    500: "Server error (logged).",
}


def error_responses(described: Mapping[int, str]) -> dict[int, OpenApiResponse]:
    """``extend_schema(responses=...)`` entries for the errors an endpoint answers, each with
    the sentence that says when."""
    return {code: OpenApiResponse(ErrorOutput, description=text) for code, text in described.items()}


class ApiSchema(AutoSchema):
    """drf-spectacular's schema, plus the errors every operation can answer, worked out from
    the view (authentication, permissions, parameters, body, throttles) so that an endpoint
    added later is documented the same way without anyone remembering to."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        for code, text in self._implicit_errors():
            if str(code) not in responses:
                response = self._get_response_for_code(
                    ErrorOutput, str(code), media_types=["application/json"], direction=direction
                )
                response["description"] = text
                responses[str(code)] = response
        for key, response in responses.items():
            if key >= "400" and "content" in response:
                # Errors are JSON whatever the endpoint renders on success (CSV, HTML).
                response["content"] = {"application/json": response["content"].get("application/json")}
        return dict(sorted(responses.items()))

    def _implicit_errors(self) -> Iterable[tuple[int, str]]:
        view = self.view
        needs_auth = not any(isinstance(p, AllowAny) for p in view.get_permissions())
        authenticators = view.get_authenticators()
        has_body = self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None
        has_query = (
            any(
                isinstance(p, serializers.Serializer | type) or getattr(p, "location", "") == "query"
                for p in self.get_override_parameters()
            )
            or self._paginated()
        )
        if has_body or has_query:
            yield 400, _GENERIC_ERRORS[400]
        if needs_auth:
            first = authenticators[0] if authenticators else None
            if first is not None and first.authenticate_header(view.request):
                yield 401, _GENERIC_ERRORS[401]
            yield 403, _GENERIC_ERRORS[403]
        if "{" in self.path or self._paginated():
            yield 404, _GENERIC_ERRORS[404]
        yield 406, _GENERIC_ERRORS[406]
        if has_body:
            yield 415, _GENERIC_ERRORS[415]
        if view.get_throttles():
            yield 429, _GENERIC_ERRORS[429]
        yield 500, _GENERIC_ERRORS[500]

    def _get_request_body(self, direction: Any = "request") -> dict | None:
        body = super()._get_request_body(direction)
        if body is not None and self.method in ("POST", "PUT"):
            body["required"] = True  # an empty POST or PUT is a 400, never "nothing to say"
        return body

    def _map_serializer(self, serializer: Any, direction: Any, bypass_extensions: bool = False) -> dict:
        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        if direction == "request" and isinstance(force_instance(serializer), StrictInput):
            schema["additionalProperties"] = False  # StrictInput refuses fields it does not list
        return schema

    def get_serializer_name(self, serializer: Any, direction: Any) -> str:
        """``LabelOutput`` → ``Label``, ``LabelChangeInput`` → ``LabelChange`` (+ ``Request``)."""
        name = super().get_serializer_name(serializer, direction)
        for suffix in ("Output", "Input"):
            if name.endswith(suffix) and len(name) > len(suffix):
                return name[: -len(suffix)]
        return name

    def _paginated(self) -> bool:
        return self.method == "GET" and self._get_paginator() is not None and self._is_list_view()


# --- Views documented from here -----------------------------------------------------------------


class TokenCreateSchema(OpenApiViewExtension):
    """``POST /api/token/`` (accounts.api.ApiTokenCreateApi) as the schema shows it. Kept here, beside the
    error shape it answers with, rather than on the view; moving this ``extend_schema`` onto the view is a
    straight copy."""

    target_class = "accounts.api.ApiTokenCreateApi"

    def view_replacement(self) -> type[APIView]:
        from accounts.api import TokenCreateInput, TokenCreateOutput

        documented = extend_schema(
            operation_id="token_create",
            tags=["auth"],
            summary="Log in: a token for scripts",
            description="A new token for scripts, valid BIASLAB_API_TOKEN_HOURS hours and revoked by a "
            "password change. JSON or a form post (`curl -d username=… -d password=…`). Send it as "
            "`Authorization: Token <token>`. Failed logins lock the username out from that address "
            "for a while (429 with Retry-After).",
            # JSON only in the schema, as everywhere else (one way to say it, and generated
            # clients pick one body type); the form posts of `curl -d` still work.
            request={"application/json": TokenCreateInput},
            responses={
                200: TokenCreateOutput,
                **error_responses(
                    {
                        400: "A field is missing, or the username and password do not log in "
                        "(code invalid_credentials).",
                        429: "This username is locked out from this address after failed logins, or "
                        "this address asks too often: wait the seconds in Retry-After.",
                    }
                ),
            },
            examples=[
                OpenApiExample(
                    "Log in", value={"username": "demo-annotator-1", "password": "…"}, request_only=True
                ),
                OpenApiExample(
                    "A token", value={"token": "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"}, response_only=True
                ),
            ],
        )
        return extend_schema_view(post=documented)(type("ApiTokenCreateApi", (self.target,), {}))
