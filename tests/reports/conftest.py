"""A fixture study with known counts for the report tests (numbers worked by hand in the tests).

Final labels per (T2I model, prompt), and the verdicts of detector "fake" version "2":

    sdxl  doctor (profession)  human m m m f lq     fake m m f f m
    sdxl  nurse  (profession)  human f f other      fake f filtered filtered
    sdxl  gym    (place)       human lq lq          fake filtered filtered
    sd3   doctor (profession)  human m m f f  + 1 image without a final label
                                                    fake m m f m (+ m on the unlabelled image)

"fake" version "1" (older) said female for every sdxl doctor image; detector "blind" failed on
one image and filtered another. Annotators anna and ben labelled four sdxl doctor images:
(m, m), (m, m), (f, m), (lq, lq).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from django.core.cache import cache

from annotate.models import Image
from detectors.models import PredictionStatus
from tests.factories import FinalLabelFactory, ImageFactory, LabelFactory, PredictionFactory, PromptFactory


@pytest.fixture(autouse=True)
def _empty_report_cache():
    """The dashboard caches reports under a data fingerprint (counts and highest ids). Test
    databases roll back, so two tests can reuse the same ids for different data: start each
    test with an empty cache (in production ids only grow, see reports.selectors)."""
    cache.clear()
    yield
    cache.clear()


@dataclass
class ReportStudy:
    study: object
    images: dict[str, list[Image]] = field(default_factory=dict)


def _images(
    study, prompt, model: str, finals: list[str | None], verdicts: list[str], old_verdict: str = ""
) -> list[Image]:
    images = []
    for final, verdict in zip(finals, verdicts, strict=True):
        image = ImageFactory(study=study, prompt=prompt, t2i_model=model)
        if final is not None:
            FinalLabelFactory(image=image, value=final)
        if old_verdict:  # an older version's prediction, written before version "2"
            PredictionFactory(image=image, detector="fake", version="1", verdict=old_verdict)
        PredictionFactory(
            image=image,
            detector="fake",
            version="2",
            verdict=verdict,
            filter_reason="no_face" if verdict == "filtered" else "",
        )
        images.append(image)
    return images


@pytest.fixture
def report_study(study, annotator_a, annotator_b) -> ReportStudy:
    doctor = PromptFactory(study=study, category="profession", word="doctor")
    nurse = PromptFactory(study=study, category="profession", word="nurse")
    gym = PromptFactory(study=study, category="place", word="gym")
    fixture = ReportStudy(study=study)
    # Older version first: the report must use version "2", the one run last.
    fixture.images["sdxl_doctor"] = _images(
        study,
        doctor,
        "sdxl",
        ["male", "male", "male", "female", "low_quality"],
        ["male", "male", "female", "female", "male"],
        old_verdict="female",
    )
    fixture.images["sdxl_nurse"] = _images(
        study, nurse, "sdxl", ["female", "female", "other"], ["female", "filtered", "filtered"]
    )
    fixture.images["sdxl_gym"] = _images(
        study, gym, "sdxl", ["low_quality", "low_quality"], ["filtered", "filtered"]
    )
    fixture.images["sd3_doctor"] = _images(
        study,
        doctor,
        "sd3",
        ["male", "male", "female", "female", None],
        ["male", "male", "female", "male", "male"],
    )
    PredictionFactory(
        image=fixture.images["sdxl_nurse"][0],
        detector="blind",
        version="0",
        status=PredictionStatus.FAILED,
        verdict="",
        error="boom",
    )
    PredictionFactory(
        image=fixture.images["sdxl_doctor"][0],
        detector="blind",
        version="0",
        verdict="filtered",
        filter_reason="no_face",
    )
    pairs = [("male", "male"), ("male", "male"), ("female", "male"), ("low_quality", "low_quality")]
    for image, (a, b) in zip(fixture.images["sdxl_doctor"], pairs, strict=False):
        LabelFactory(image=image, annotator=annotator_a, value=a)
        LabelFactory(image=image, annotator=annotator_b, value=b)
    return fixture
