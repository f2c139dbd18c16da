"""``manage.py check`` refuses a protocol or detector registration whose dotted paths name nothing."""

from __future__ import annotations

import dataclasses
import sys
from types import MappingProxyType

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from detectors import registry
from studies.checks import check_protocols, dotted_path_problem
from studies.protocols import PROTOCOLS


def ids(messages):
    return sorted(message.id for message in messages)


def registered(monkeypatch, entries):
    """Check ``entries`` as the registrations, without registering them: the report pages would
    mount their URLconfs at once."""
    monkeypatch.setattr("studies.checks.protocol_registrations", lambda: entries)


def test_every_installed_protocol_and_detector_passes_its_check():
    assert ids(run_checks(tags=["protocols", "detectors"])) == []


def test_a_dotted_path_is_resolved_without_importing_the_module():
    assert dotted_path_problem("detectors.plugins.clip.ClipDetector") is None
    assert dotted_path_problem("detectors.plugins.clip.NoSuchDetector") == (
        "module 'detectors.plugins.clip' defines no 'NoSuchDetector'"
    )
    assert dotted_path_problem("detectors.plugins.nowhere.Clip") == "no module 'detectors.plugins.nowhere'"
    assert dotted_path_problem("protocols.gender.urls", module=True, attribute="urlpatterns") is None
    assert "defines no 'ESTIMAND'" in dotted_path_problem(
        "protocols.gender.urls", module=True, attribute="ESTIMAND"
    )


def test_checking_the_detector_registry_imports_no_plugin(monkeypatch):
    for name in [m for m in sys.modules if m.startswith("detectors.plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    assert ids(run_checks(tags=["detectors"])) == []
    assert [m for m in sys.modules if m.startswith("detectors.plugins.")] == []


def test_a_spec_with_wrong_paths_fails_the_check_naming_each_field(monkeypatch):
    broken = dataclasses.replace(
        PROTOCOLS["gender"],
        key="broken",
        analysis="protocols.gender.analysis.NoSuchAnalysis",
        urls="protocols.gender.no_urls",
        demo="protocols.gender.demo.NoSuchDemo",
        estimates="protocols.gender.urls",
        kind_validators=MappingProxyType({"mood": "protocols.gender.spec.no_validator"}),
        kind_checks=MappingProxyType(
            {"mood": "protocols.gender.spec.SPEC", "other": "protocols.gender.spec.SPEC"}
        ),
    )
    registered(monkeypatch, {"broken": broken})
    messages = check_protocols()
    assert ids(messages) == ["protocols.E003"] * 4 + ["protocols.E004", "protocols.E005"]
    text = "\n".join(m.msg for m in messages)
    assert "analysis = 'protocols.gender.analysis.NoSuchAnalysis'" in text
    assert "no module 'protocols.gender.no_urls'" in text
    assert "demo = 'protocols.gender.demo.NoSuchDemo'" in text
    assert "defines no 'ESTIMAND'" in text
    assert "kind_validators['mood']" in text


def test_an_app_whose_spec_path_names_nothing_fails_manage_py_check(monkeypatch):
    registered(monkeypatch, {"broken": "protocols.gender.spec.NO_SUCH_SPEC"})
    assert ids(check_protocols()) == ["protocols.E001"]
    with pytest.raises(SystemCheckError, match=r"protocols\.E001"):
        call_command("check", "--tag", "protocols")


def test_an_app_whose_spec_is_another_protocols_fails_the_check(monkeypatch):
    registered(monkeypatch, {"broken": "protocols.gender.spec.SPEC"})
    assert ids(check_protocols()) == ["protocols.E002"]


def test_a_detector_entry_naming_no_class_fails_the_check():
    registry.register("broken_detector", "detectors.plugins.clip.NoSuchDetector")
    try:
        messages = run_checks(tags=["detectors"])
    finally:
        registry.unregister("broken_detector")
    assert ids(messages) == ["detectors.E001"]
    assert "'broken_detector'" in messages[0].msg
