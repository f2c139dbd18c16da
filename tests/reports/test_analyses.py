"""The registry of analyses (one per study protocol), the shared report scope, and the study
and filter checks every report runs first."""

from __future__ import annotations

import subprocess
import sys

import pytest

from protocols.gender.analysis import GenderAnalysis
from reports import analyses
from reports.render import to_html
from reports.selectors import Scope, UnknownFilter, check_filters, study_for_slug
from studies.models import Item, Question
from studies.protocols import PROTOCOLS
from tests.factories import ItemFactory, PromptFactory, StudyFactory
from tests.reports.dashboard_data import predict


def test_every_registered_analysis_is_a_known_protocol_and_gender_is_one():
    assert set(analyses.ANALYSES) <= set(PROTOCOLS)
    analysis = analyses.analysis_for("gender")
    assert isinstance(analysis, GenderAnalysis)
    assert analysis.protocol == "gender"
    assert analyses.analysis_for("gender") is analysis  # imported and built once


def test_a_protocol_without_an_analysis_gets_a_clear_error(unreported_protocol):
    with pytest.raises(
        analyses.NoAnalysis,
        match=rf"protocol '{unreported_protocol}' have no report yet \(reports exist for: .*gender",
    ):
        analyses.analysis_for(unreported_protocol)


@pytest.mark.subprocess
def test_the_registry_imports_no_analysis_until_one_is_asked_for():
    code = (
        "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); "
        "django.setup(); import reports.analyses; keys = sorted(reports.analyses.ANALYSES); "
        "print(keys, sorted(m for m in sys.modules if m.startswith('protocols.') and m.endswith('.analysis')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Every protocol's analysis is registered (read from its spec), none imported.
    assert out.stdout.strip() == "['attributes', 'gender', 'objects', 'pair_change', 'questions'] []"


@pytest.mark.django_db
def test_a_gender_study_needs_a_gender_question_with_two_clear_answers():
    study = StudyFactory(slug="odd")
    analyses.analysis_of(study)  # the preset question is fine
    Question.objects.filter(study=study, key="gender").update(key="sex")
    with pytest.raises(analyses.AnalysisError, match="no question with key 'gender'"):
        analyses.analysis_of(study)


@pytest.mark.django_db
def test_the_scope_filters_items_labels_and_predictions_alike(study):
    doctor = PromptFactory(study=study, category="profession")
    gym = PromptFactory(study=study, category="place")
    wanted = ItemFactory(prompt=doctor, t2i_model="sd3")
    ItemFactory(prompt=doctor, t2i_model="sdxl")
    ItemFactory(prompt=gym, t2i_model="sd3")
    ItemFactory(
        prompt=PromptFactory(study=StudyFactory(slug="elsewhere"), category="profession"), t2i_model="sd3"
    )
    scope = Scope(study, t2i_model="sd3", category="profession")
    assert list(scope.items()) == [wanted]
    assert list(Item.objects.filter(scope.q())) == [wanted]
    predict(wanted, "fake", "1", "male")
    from reports.selectors import predictions_in_scope

    assert [p.image_id for p in predictions_in_scope(scope)] == [wanted.item_images.get().image_id]
    assert scope.narrowed(category=None).items().count() == 2


@pytest.mark.django_db
def test_the_study_is_named_or_the_only_one(db):
    with pytest.raises(UnknownFilter, match="no study yet"):
        study_for_slug("")
    only = StudyFactory(slug="only")
    assert study_for_slug("") == only
    assert study_for_slug("only") == only
    StudyFactory(slug="second")
    with pytest.raises(UnknownFilter, match="several studies"):
        study_for_slug(None)
    with pytest.raises(UnknownFilter, match=r"No study with slug 'nope' \(existing studies: only, second\)"):
        study_for_slug("nope")


@pytest.mark.django_db
def test_unknown_filter_values_are_named_with_what_exists(study):
    item = ItemFactory(prompt=PromptFactory(study=study, category="place"), t2i_model="sd3")
    predict(item, "fake", "1", "male")
    with pytest.raises(UnknownFilter, match=r"No images of T2I model 'dalle' \(T2I models: sd3\)"):
        check_filters(Scope(study, t2i_model="dalle"))
    with pytest.raises(UnknownFilter, match=r"No images of prompt category 'job' \(categories: place\)"):
        check_filters(Scope(study, category="job"))
    with pytest.raises(UnknownFilter, match=r"No predictions of detector 'x' \(detectors: fake\)"):
        check_filters(Scope(study), detector="x")
    check_filters(Scope(study, t2i_model="sd3", category="place"), detector="fake")


def test_to_html_renders_a_table_as_the_dashboard_shows_it():
    from protocols.gender.tables import filtering_table

    report = {
        "detectors": {
            "a/b": {
                "version": "1",
                "filtering": {"precision": 0.5, "tp": 1, "fp": 1, "fn": 0, "tn": 0},
                "accuracy": {},
            }
        }
    }
    html = to_html(filtering_table(report), query="study=s", link_detectors=True, detectors=["a/b"])
    assert 'id="table-filtering"' in html
    assert 'href="/reports/detectors/a/b/?study=s"' in html
    assert 'href="/reports/tables/filtering.md?study=s"' in html
    assert ">50.00</td>" in html
