"""The OpenAPI schema: served to logged-in users as JSON and YAML with Swagger UI and Redoc from
the installed package, valid OpenAPI 3, generated without a warning, and describing every
endpoint under /api/ — parameters (required ones marked), typed ids, bodies, every status with
the error shape, security, examples. A new endpoint that is not described fails here."""

from __future__ import annotations

import io
import json
import re

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.validation import validate_schema

from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db

JSON = "application/vnd.oai.openapi+json"
ERROR_REF = "#/components/schemas/Error"
WRITES = {"post", "put", "patch"}


@pytest.fixture
def schema(researcher, api_for):
    response = api_for(researcher).get("/api/schema/", HTTP_ACCEPT=JSON)
    assert response.status_code == 200
    return json.loads(response.content)


def operations(schema):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def resolve(schema, node):
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def test_the_schema_is_served_as_json_and_yaml_to_every_logged_in_user(
    researcher, annotator_a, outsider, api_for
):
    documents = []
    for user in (researcher, annotator_a, outsider):
        as_json = api_for(user).get("/api/schema/", {"format": "json"})
        assert as_json["Content-Type"].startswith("application/vnd.oai.openapi+json")
        as_yaml = api_for(user).get("/api/schema/")
        assert as_yaml["Content-Type"].startswith("application/vnd.oai.openapi")
        assert yaml.safe_load(as_yaml.content) == json.loads(as_json.content)
        documents.append(json.loads(as_json.content))
    assert documents[0] == documents[1] == documents[2]  # every endpoint, whoever asks


def test_the_schema_and_its_pages_are_for_logged_in_users_only(db, api_for):
    for path in ("/api/schema/", "/api/schema/swagger/", "/api/schema/redoc/"):
        assert_error(api_for(None).get(path), 401, "not_authenticated")


@pytest.mark.parametrize(
    ("path", "asset"),
    [("/api/schema/swagger/", "swagger-ui-bundle.js"), ("/api/schema/redoc/", "redoc.standalone.js")],
)
def test_swagger_ui_and_redoc_come_from_the_installed_package(client_for, researcher, path, asset):
    response = client_for(researcher).get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert "/api/schema/" in html
    scripts = re.findall(r'src="([^"]+)"', html)
    assert any(asset in src for src in scripts), scripts
    assert not [src for src in scripts if src.startswith(("http://", "https://", "//"))]  # no CDN
    local = next(src for src in scripts if asset in src)
    assert finders.find(local.split("/static/", 1)[-1])


def test_the_schema_is_valid_openapi_and_generates_without_warnings(schema):
    validate_schema(schema)
    out = io.StringIO()
    call_command("spectacular", "--fail-on-warn", "--validate", "--format", "openapi-json", stdout=out)
    assert json.loads(out.getvalue())["paths"].keys() == schema["paths"].keys()


def _api_routes():
    """Every (route, view class) under api/ in the URLconf."""

    def walk(patterns, prefix):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith("api/"):
                yield route, getattr(pattern.callback, "cls", None)

    return list(walk(get_resolver().url_patterns, ""))


def test_every_api_endpoint_is_in_the_schema(schema):
    documented = {path for path in schema["paths"]}
    for route, _view in _api_routes():
        if route.startswith("api/schema/"):
            continue
        path = "/" + re.sub(
            r"<(?:\w+:)?(\w+)>", lambda m: "{" + ("id" if m[1] == "pk" else m[1]) + "}", route
        )
        assert path in documented, f"{path} is served but not described in the schema"


def test_every_operation_is_typed_with_its_statuses_and_the_error_shape(schema):
    for path, method, operation in operations(schema):
        where = f"{method.upper()} {path}"
        assert operation.get("operationId"), where
        assert operation.get("tags"), where
        responses = operation["responses"]
        successes = [code for code in responses if code.startswith("2")]
        # One success, or 200 and 202 where a request may answer "accepted, being computed".
        assert len(successes) == 1 or successes == ["200", "202"], where
        for success in successes:
            body = responses[success]["content"]["application/json"]["schema"]
            assert "Unspecified" not in json.dumps(body), where
            assert resolve(schema, body).get("type") in ("object", "array") or "oneOf" in body, where
        for code, response in responses.items():
            if code >= "400":
                assert response["content"] == {"application/json": {"schema": {"$ref": ERROR_REF}}}, (
                    where,
                    code,
                )
                assert response["description"], (where, code)
        assert {"406", "500"} <= set(responses), where
        if any(p["in"] == "query" for p in operation.get("parameters", [])) or operation.get("requestBody"):
            assert "400" in responses, where
        if "{" in path:
            assert "404" in responses, where
        if operation["security"] != [{}]:
            assert {"401", "403"} <= set(responses), where
        assert "429" in responses, where  # the API's rate limits apply everywhere


def test_ids_in_paths_are_positive_64_bit_integers(schema):
    for path, method, operation in operations(schema):
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path" and parameter["name"] == "id":
                assert parameter["schema"] == {
                    "type": "integer",
                    "format": "int64",
                    "minimum": 1,
                    "maximum": 2**63 - 1,
                }, (method, path)


@pytest.mark.parametrize(
    "path",
    [
        "/api/items/",
        "/api/images/",
        "/api/disputes/",
        "/api/agreement/",
        "/api/ground-truth/",
        "/api/questions/",
    ],
)
def test_the_study_is_a_required_query_parameter(schema, path):
    [study] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "study"]
    assert study["required"] is True
    assert study["schema"]["pattern"] == "^[-a-zA-Z0-9_]+$"


def test_lists_are_documented_as_they_are_returned(schema):
    for path in ("/api/labels/", "/api/items/", "/api/images/", "/api/predictions/"):
        page = resolve(
            schema, schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        )
        assert set(page["properties"]) == {"count", "next", "previous", "results"}, path
        page_parameter = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "page"]
        assert page_parameter[0]["schema"]["minimum"] == 1
    for path in ("/api/studies/", "/api/disputes/", "/api/detector-runs/", "/api/questions/"):
        assert (
            schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["type"]
            == "array"
        )
    next_item = schema["paths"]["/api/studies/{slug}/next/"]["get"]["responses"]["200"]
    assert resolve(schema, next_item["content"]["application/json"]["schema"])["type"] == "object"


def test_statuses_are_the_ones_the_endpoints_answer(schema):
    paths = schema["paths"]
    assert set(paths["/api/token/"]["post"]["responses"]) >= {"200", "400", "429"}
    assert "201" not in paths["/api/token/"]["post"]["responses"]
    assert set(paths["/api/disputes/{id}/resolve/"]["post"]["responses"]) >= {
        "200",
        "400",
        "403",
        "404",
        "409",
    }
    assert set(paths["/api/labels/"]["post"]["responses"]) >= {"201", "400", "403", "404", "409"}
    assert set(paths["/api/labels/{id}/"]) == {"get", "put", "patch"}  # labels are never deleted


def test_request_bodies_are_required_strict_and_typed(schema):
    for path, method, operation in operations(schema):
        if method not in WRITES:
            continue
        body = operation["requestBody"]
        assert body.get("required", False) == (method != "patch"), (method, path)
        shape = resolve(schema, body["content"]["application/json"]["schema"])
        variants = [resolve(schema, v) for v in shape.get("oneOf", [shape])]
        for variant in variants:
            assert variant["type"] == "object"
            if path != "/api/token/":
                assert variant["additionalProperties"] is False, (method, path)
    submit = resolve(
        schema,
        schema["paths"]["/api/labels/"]["post"]["requestBody"]["content"]["application/json"]["schema"],
    )
    one, every = (resolve(schema, v) for v in submit["oneOf"])
    assert set(one["required"]) == {"item", "value"}
    assert one["properties"]["reason"]["type"] == "string"
    assert set(every["required"]) == {"item", "answers"}
    assert every["properties"]["answers"]["minProperties"] == 1
    token = resolve(
        schema, schema["paths"]["/api/token/"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    )
    assert set(token["required"]) == {"username", "password"}


def test_security_schemes_and_examples(schema):
    assert set(schema["components"]["securitySchemes"]) == {"cookieAuth", "tokenAuth"}
    assert schema["components"]["securitySchemes"]["tokenAuth"]["in"] == "header"
    assert schema["paths"]["/api/token/"]["post"]["security"] == [{}]
    assert {"cookieAuth": []} in schema["paths"]["/api/labels/"]["get"]["security"]
    for path, method in (
        ("/api/token/", "post"),
        ("/api/labels/", "post"),
        ("/api/disputes/{id}/resolve/", "post"),
    ):
        assert schema["paths"][path][method]["requestBody"]["content"]["application/json"]["examples"], path


def test_links_lead_from_the_next_item_to_submitting_a_label(schema):
    links = schema["paths"]["/api/studies/{slug}/next/"]["get"]["responses"]["200"]["links"]
    assert links["SubmitFirstChoice"]["operationId"] == "labels_create"
    assert schema["paths"]["/api/labels/"]["post"]["responses"]["201"]["links"]["ChangeLabel"][
        "operationId"
    ] == ("labels_update")
