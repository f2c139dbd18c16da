"""A fixture study with known counts for the report tests (numbers worked by hand in the tests).

Final labels per (T2I model, prompt), and the verdicts of detector "fake" version "2":

    sdxl  doctor (profession)  human m m m f lq     fake m m f f m
    sdxl  nurse  (profession)  human f f other      fake f filtered filtered
    sdxl  gym    (place)       human lq lq          fake filtered filtered
    sd3   doctor (profession)  human m m f f  + 1 item without a final label
                                                    fake m m f m (+ m on the unlabelled item)

"fake" version "1" (older) said female for every sdxl doctor image; detector "blind" failed on
one image and filtered another. Annotators anna and ben labelled four sdxl doctor items:
(m, m), (m, m), (f, m), (lq, lq). Rows are built with the factories: one-image items of a gender
study, predictions on each item's image file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from django.core.cache import cache
from django.urls import reverse

from reports import analyses
from studies.models import Item
from tests.factories import FinalLabelFactory, ItemFactory, LabelFactory, PromptFactory
from tests.reports import dashboard_data
from tests.reports.dashboard_data import predict


@pytest.fixture(autouse=True)
def _empty_report_cache():
    """The dashboard caches reports under a data fingerprint (counts and highest ids). Test
    databases roll back, so two tests can reuse the same ids for different data: start each
    test with an empty cache (in production ids only grow, see reports.selectors)."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def unreported_protocol(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A protocol with no analysis in the registry: pair_change, taken out of it should its
    analysis have come (each protocol gets one with its issue)."""
    monkeypatch.delitem(analyses.ANALYSES, "pair_change", raising=False)
    analyses.analysis_for.cache_clear()
    yield "pair_change"
    analyses.analysis_for.cache_clear()


@dataclass
class ReportStudy:
    study: object
    items: dict[str, list[Item]] = field(default_factory=dict)


def _items(
    study, prompt, model: str, finals: list[str | None], verdicts: list[str], old_verdict: str = ""
) -> list[Item]:
    items = []
    for final, verdict in zip(finals, verdicts, strict=True):
        item = ItemFactory(prompt=prompt, t2i_model=model)
        if final is not None:
            FinalLabelFactory(item=item, value=final)
        if old_verdict:  # an older version's prediction, written before version "2"
            predict(item, "fake", "1", old_verdict)
        predict(item, "fake", "2", verdict)
        items.append(item)
    return items


@pytest.fixture
def report_study(study, annotator_a, annotator_b) -> ReportStudy:
    doctor = PromptFactory(study=study, category="profession", word="doctor")
    nurse = PromptFactory(study=study, category="profession", word="nurse")
    gym = PromptFactory(study=study, category="place", word="gym")
    fixture = ReportStudy(study=study)
    # Older version first: the report must use version "2", the one run last.
    fixture.items["sdxl_doctor"] = _items(
        study,
        doctor,
        "sdxl",
        ["male", "male", "male", "female", "low_quality"],
        ["male", "male", "female", "female", "male"],
        old_verdict="female",
    )
    fixture.items["sdxl_nurse"] = _items(
        study, nurse, "sdxl", ["female", "female", "other"], ["female", "filtered", "filtered"]
    )
    fixture.items["sdxl_gym"] = _items(
        study, gym, "sdxl", ["low_quality", "low_quality"], ["filtered", "filtered"]
    )
    fixture.items["sd3_doctor"] = _items(
        study,
        doctor,
        "sd3",
        ["male", "male", "female", "female", None],
        ["male", "male", "female", "male", "male"],
    )
    predict(fixture.items["sdxl_nurse"][0], "blind", "0", failed=True)
    predict(fixture.items["sdxl_doctor"][0], "blind", "0", "filtered")
    pairs = [("male", "male"), ("male", "male"), ("female", "male"), ("low_quality", "low_quality")]
    for item, (a, b) in zip(fixture.items["sdxl_doctor"], pairs, strict=False):
        LabelFactory(item=item, annotator=annotator_a, value=a)
        LabelFactory(item=item, annotator=annotator_b, value=b)
    return fixture


@pytest.fixture
def fx(study, annotator_a, annotator_b):
    """The dashboard's fixture study (``dashboard_data``); the attributes tests have their own."""
    return dashboard_data.build(study, annotator_a, annotator_b)


@pytest.fixture
def rita(researcher, client_for):
    """A researcher's logged-in client."""
    return client_for(researcher)


def report_urls(study: str, page: str, args: list[str], *, table: str, chart: str) -> list[str]:
    """One report page of each kind for ``study``: its overview, the drill-down ``page`` of
    ``args``, ``table`` as CSV and ``chart`` as SVG."""
    return [
        f"{url}?study={study}"
        for url in (
            reverse("reports:overview"),
            reverse(f"reports:{page}", args=args),
            reverse("reports:table", args=[table, "csv"]),
            reverse("reports:chart", args=[chart, "svg"]),
        )
    ]


@pytest.fixture(
    params=[(who, method) for method in ("get", "post") for who in ("annotator_a", "outsider")]
    + [("anonymous", "get")],
    ids=lambda param: f"{param[1]}-{param[0]}",
)
def refused(request, client_for, client) -> Callable[[str], None]:
    """Checks that a report page refuses one visitor: an annotator's or an outsider's ``get`` or
    ``post`` is answered 403, an anonymous visitor is sent to log in."""
    who, method = request.param
    if who == "anonymous":

        def sent_to_log_in(url: str) -> None:
            response = client.get(url)
            assert response.status_code == 302, url
            assert "/accounts/login/" in response["Location"], url

        return sent_to_log_in
    call = getattr(client_for(request.getfixturevalue(who)), method)

    def forbidden(url: str) -> None:
        assert call(url).status_code == 403, url

    return forbidden
