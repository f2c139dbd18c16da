"""``manage.py questions_demo`` builds a study whose report shows every part: groups compared,
a dispute, a detector; running it again changes nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from annotate.models import FinalLabel, Label
from detectors.models import Prediction
from studies.models import Item, Study

pytestmark = pytest.mark.django_db


def test_the_demo_builds_a_reportable_study_once(tmp_path):
    out = io.StringIO()
    call_command("questions_demo", "--folder", str(tmp_path / "demo"), stdout=out)
    assert "Demo study 'demo-questions' is ready" in out.getvalue()
    counts = (
        Item.objects.count(),
        Label.objects.count(),
        FinalLabel.objects.count(),
        Prediction.objects.count(),
    )
    # 20 images answered twice (2 questions), one (image, question) disputed; 4 left to label.
    assert counts == (24, 80, 39, 24)
    # Its guidelines: on the labeling screen, and its line in the study chooser.
    assert Study.objects.get(slug="demo-questions").description.startswith("Answer both questions")
    call_command("questions_demo", "--folder", str(tmp_path / "again"), stdout=io.StringIO())
    assert (Item.objects.count(), Label.objects.count(), Prediction.objects.count()) == (24, 80, 24)
    report = io.StringIO()
    call_command("bias_report", "--study", "demo-questions", stdout=report)
    hat = json.loads(report.getvalue())["questions"]["hat"]["demo-painter"]
    assert hat["groups"]["street"]["shares"]["yes"] > hat["groups"]["office"]["shares"]["yes"]
    assert hat["p_value"] < 0.05
