"""Every protocol is one package registered once: the core reads what differs per
protocol from its spec and its analysis — the analysis and pages it has, whether its items are
pairs, the options it adds to ``bias_report``, the links it adds to the report navigation, its
demo — never from its name."""

from __future__ import annotations

import io
import json
from importlib import import_module

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from annotate.demo.seeding import ProtocolDemo, demo_of
from reports import analyses
from studies.protocols import PROTOCOLS, ProtocolSpec
from tests.factories import StudyFactory


@pytest.mark.parametrize("key", list(PROTOCOLS))
def test_every_protocol_spec_lives_in_its_own_package_and_names_its_parts_there(key):
    spec = PROTOCOLS[key]
    assert isinstance(spec, ProtocolSpec)
    assert spec.key == key
    assert import_module(f"protocols.{key}.spec").SPEC is spec
    package = f"protocols.{key}."
    for dotted in (spec.analysis, spec.urls, spec.demo):
        assert not dotted or dotted.startswith(package), dotted


def test_the_analyses_are_read_from_the_specs():
    assert dict(analyses.ANALYSES) == {key: PROTOCOLS[key].analysis for key in PROTOCOLS}
    for key in PROTOCOLS:
        assert analyses.analysis_for(key).protocol == key


def test_only_a_protocol_with_several_image_roles_has_pairs():
    assert {key for key in PROTOCOLS if PROTOCOLS[key].paired} == {"pair_change"}
    assert PROTOCOLS["pair_change"].image_roles == ("input", "output")


@pytest.mark.parametrize("key", [key for key in PROTOCOLS if PROTOCOLS[key].demo])
def test_a_demo_named_by_a_spec_is_a_protocol_demo_of_that_protocol(key):
    demo = demo_of(PROTOCOLS[key].demo)
    assert isinstance(demo, ProtocolDemo)
    assert demo.protocol == key


def test_bias_report_takes_the_options_the_analyses_declare_and_refuses_them_elsewhere(db):
    options = analyses.report_options()
    assert {flag: protocols for flag, (_, protocols) in options.items()} == {
        "--exclude-person": ["objects"],
        "--measure": ["pair_change"],
    }
    StudyFactory(slug="g", protocol="gender")
    with pytest.raises(CommandError, match=r"--measure is for pair-change studies \(protocol pair_change\)"):
        call_command("bias_report", "--study", "g", "--measure", "age=x", stdout=io.StringIO())
    out = io.StringIO()
    call_command("bias_report", "--study", "g", "--bootstrap", "0", stdout=out)
    assert "coverage" in json.loads(out.getvalue())


def test_the_estimate_link_of_the_report_navigation_is_on_every_protocol_with_an_estimate(
    db, researcher, client_for
):
    StudyFactory(slug="g", protocol="gender")
    StudyFactory(slug="o", protocol="objects")
    rita = client_for(researcher)
    gender_page = rita.get(reverse("reports:overview"), {"study": "g"}).content.decode()
    objects_page = rita.get(reverse("reports:overview"), {"study": "o"}).content.decode()
    assert f'href="{reverse("estimates:page")}?study=g"' in gender_page
    assert "Estimate from few labels" in gender_page
    assert f'href="{reverse("estimates:page")}?study=o"' in objects_page  # objects has an estimate too
