"""The questions protocol is one package, registered once by dotted path: the core's
registries resolve it on first use, ``Study.protocol`` and ``Prediction.kind`` take their choices
from the registries, and no core package names the protocol."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from detectors.kinds import KINDS, OutputInvalid, output_fits_questions, output_validate
from detectors.models import Prediction
from protocols.questions.spec import SPEC
from reports.analyses import analysis_for
from studies.models import Study
from studies.protocols import PROTOCOLS, protocol_choices
from tests.annotate.test_admin import study_form

CORE = ("studies", "annotate", "detectors", "estimates", "config", "accounts", "templates")


def test_the_registries_resolve_the_package_by_dotted_path():
    assert PROTOCOLS["questions"] is SPEC
    assert type(analysis_for("questions")).__module__ == "protocols.questions.analysis"
    assert "answers" in KINDS
    assert ("questions", SPEC.title) in protocol_choices()
    assert Study._meta.get_field("protocol").choices == protocol_choices()
    assert ("answers", "answers") in Prediction._meta.get_field("kind").choices


def test_answers_outputs_are_checked_for_shape_and_against_the_questions():
    assert output_validate("answers", {"age": "young"}) == {"answers": {"age": "young"}}
    for bad, field in (({}, "output"), ({"age": ""}, "age"), ({"age": 1}, "age"), ([], "output")):
        with pytest.raises(OutputInvalid) as info:
            output_validate("answers", bad)
        assert info.value.field == field
    questions = {"age": ["young", "old"]}
    output_fits_questions("answers", {"age": "old"}, questions)
    with pytest.raises(OutputInvalid, match="unknown question"):
        output_fits_questions("answers", {"height": "tall"}, questions)
    with pytest.raises(OutputInvalid, match="unknown answer 'middle'"):
        output_fits_questions("answers", {"age": "middle"}, questions)
    output_fits_questions("gender", {"label": "male"}, questions)  # a kind without a study check


def test_no_core_package_compares_a_protocol_with_the_questions_name():
    root = Path(settings.BASE_DIR)
    pattern = re.compile(
        r"""protocol\s*(?:==|!=|in)\s*\(?\s*["']questions["']|["']questions["']\s*(?:==|!=)\s*\S*protocol"""
    )
    found = [
        f"{path.relative_to(root)}:{n}"
        for package in CORE
        for path in (root / package).rglob("*")
        if path.suffix in {".py", ".html", ".js"}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line)
    ]
    assert not found, found


def test_the_admin_sends_a_questions_study_to_create_study(admin_client):
    response = admin_client.post(
        reverse("admin:studies_study_add"), study_form(protocol="questions", agreement="unanimous")
    )
    page = response.content.decode()
    assert "create_study SLUG --protocol questions --questions F.csv --compare" in page
    assert not Study.objects.exists()
