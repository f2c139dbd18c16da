"""Content-Security-Policy: on every response, strict by default, and every template written so
the strict policy breaks nothing (no inline script, style, handler or eval)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from config import csp
from tests.reports import dashboard_data

pytestmark = pytest.mark.django_db

# What a policy without 'unsafe-inline' / 'unsafe-eval' refuses, as it appears in a template.
INLINE = {
    "inline <script>": re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I),
    "<style> element": re.compile(r"<style[\s>]", re.I),
    "style attribute": re.compile(r"\sstyle\s*=", re.I),
    "event handler attribute": re.compile(r"\son[a-z]+\s*=", re.I),
    "hx-on attribute (needs eval)": re.compile(r"\shx-on", re.I),
    "javascript: URL": re.compile(r"javascript:", re.I),
}


def test_every_response_carries_the_strict_policy(client):
    response = client.get(reverse("login"))
    policy = response[csp.ENFORCE]
    assert policy == csp.DEFAULT_POLICY
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == directives["style-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy
    assert client.get("/healthz")[csp.ENFORCE] == csp.DEFAULT_POLICY


def test_the_policy_can_be_report_only_replaced_or_off(client, settings):
    settings.BIASLAB_CSP_REPORT_ONLY = True
    response = client.get(reverse("login"))
    assert csp.ENFORCE not in response
    assert response[csp.REPORT_ONLY] == csp.DEFAULT_POLICY
    settings.BIASLAB_CSP_REPORT_ONLY = False
    settings.BIASLAB_CSP = "default-src 'none'"
    assert client.get(reverse("login"))[csp.ENFORCE] == "default-src 'none'"
    settings.BIASLAB_CSP = ""
    response = client.get(reverse("login"))
    assert csp.ENFORCE not in response
    assert csp.REPORT_ONLY not in response


# Templates served under API_DOCS_POLICY, and what that policy allows them.
API_DOCS_TEMPLATES = {"templates/api/redoc.html": {"<style> element"}}


def test_no_template_holds_what_the_policy_refuses():
    found = []
    for path in sorted(Path(settings.BASE_DIR, "templates").rglob("*.html")):
        text = path.read_text()
        allowed = API_DOCS_TEMPLATES.get(str(path.relative_to(settings.BASE_DIR)), set())
        for what, pattern in INLINE.items():
            if what in allowed:
                continue
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(settings.BASE_DIR)}:{line}: {what}")
    assert found == []


def test_htmx_is_told_not_to_inject_styles_nor_eval(client):
    page = client.get(reverse("login")).content.decode()
    assert (
        '<meta name="htmx-config" content=\'{"includeIndicatorStyles": false, "allowEval": false}\'>' in page
    )


def test_heatmap_cells_carry_their_colour_as_data_not_inline_style(
    study, annotator_a, annotator_b, researcher, client_for
):
    dashboard_data.build(study, annotator_a, annotator_b)
    page = client_for(researcher).get(reverse("reports:heatmap")).content.decode()
    cells = re.findall(r"<td class=\"[^\"]*\" data-colour=\"(#[0-9a-f]{6})\"", page)
    assert cells, "the heatmap table has coloured cells"
    assert " style=" not in page
    script = Path(settings.BASE_DIR, "static/reports/reports.js").read_text()
    assert "cell.style.backgroundColor = cell.dataset.colour" in script


API_DOCS = ("/api/schema/swagger/", "/api/schema/swagger/?script=", "/api/schema/redoc/")


def test_only_swagger_ui_and_redoc_get_the_api_docs_policy(researcher, client_for):
    client = client_for(researcher)
    for path in API_DOCS:
        response = client.get(path)
        assert response.status_code == 200, path
        assert response[csp.ENFORCE] == csp.API_DOCS_POLICY, path
    for path in ("/api/schema/", "/api/studies/", reverse("login"), "/admin/"):
        assert client.get(path)[csp.ENFORCE] == csp.DEFAULT_POLICY, path


def test_the_api_docs_policy_relaxes_styles_and_workers_only():
    docs = dict(d.strip().split(" ", 1) for d in csp.API_DOCS_POLICY.split(";"))
    default = dict(d.strip().split(" ", 1) for d in csp.DEFAULT_POLICY.split(";"))
    assert docs.pop("style-src") == "'self' 'unsafe-inline'"
    assert docs.pop("worker-src") == "'self' blob:"
    assert docs == {k: v for k, v in default.items() if k != "style-src"}
    assert docs["script-src"] == docs["connect-src"] == "'self'"  # no eval, nothing from elsewhere


def test_the_api_docs_follow_report_only_and_off(researcher, client_for, settings):
    client = client_for(researcher)
    settings.BIASLAB_CSP_REPORT_ONLY = True
    response = client.get("/api/schema/redoc/")
    assert response[csp.REPORT_ONLY] == csp.API_DOCS_POLICY
    assert csp.ENFORCE not in response
    settings.BIASLAB_CSP_REPORT_ONLY = False
    settings.BIASLAB_CSP = ""
    for path in API_DOCS:
        response = client.get(path)
        assert csp.ENFORCE not in response
        assert csp.REPORT_ONLY not in response


def test_swagger_ui_starts_from_a_script_file_and_redoc_links_nothing_elsewhere(researcher, client_for):
    client = client_for(researcher)
    swagger = client.get("/api/schema/swagger/").content.decode()
    assert not INLINE["inline <script>"].search(swagger)
    assert '<script src="/api/schema/swagger/?script="></script>' in swagger
    script = client.get("/api/schema/swagger/?script=")
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in script.content.decode()
    redoc = client.get("/api/schema/redoc/").content.decode()
    assert not INLINE["inline <script>"].search(redoc)
    links = re.findall(r'\s(?:href|src)="([^"]+)"', redoc)
    assert any(link.endswith("redoc.standalone.js") for link in links)
    assert [link for link in links if not link.startswith("/")] == []
    assert "googleapis" not in redoc  # drf-spectacular's own Redoc page links Google Fonts
