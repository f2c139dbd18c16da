"""A small gender study for the sampling-round tests: two T2I models, three prompts each, eight
images per (model, prompt), and the verdicts of detector "fake" version "1" on every image.

``truth`` holds the label people would give each item; ``finish`` writes those final labels for
the items a round selected (as double labelling and disputes would end), so tests can play a
round through without the labelling screens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest
from django.db.models import QuerySet

from annotate.models import FinalLabel
from estimates.models import SamplingRound
from studies.models import Item, Question
from tests.factories import FinalLabelFactory, ItemFactory, PromptFactory
from tests.reports.dashboard_data import predict

MODELS = ("sdxl", "sd3")
WORDS = ("doctor", "nurse", "teacher")
PER_PROMPT = 8


@dataclass
class SampledStudy:
    study: object
    items: list[Item] = field(default_factory=list)
    truth: dict[int, str] = field(default_factory=dict)

    def finish(self, sampling_round: SamplingRound) -> int:
        """Final labels (the truth) for the round's selected items that have none; returns how many."""
        ids = sampling_round.round_items.filter(selected=True).values_list("item_id", flat=True)
        have = set(FinalLabel.objects.filter(item_id__in=ids).values_list("item_id", flat=True))
        todo = [i for i in ids if i not in have]
        for item in Item.objects.filter(pk__in=todo):
            FinalLabelFactory(item=item, value=self.truth[item.pk])
        return len(todo)

    def label(self, items: Iterable[Item]) -> None:
        for item in items:
            FinalLabelFactory(item=item, value=self.truth[item.pk])


def _truth(model_index: int, prompt_index: int, i: int) -> str:
    # doctor mostly male, nurse mostly female, teacher balanced; a few "other"/"low_quality".
    if i == PER_PROMPT - 1 and prompt_index == 2:
        return "low_quality"
    pattern = {0: "mmmmmmfm", 1: "fffffmff", 2: "mfmfmfmf"}[prompt_index]
    return "male" if pattern[(i + model_index) % PER_PROMPT] == "m" else "female"


def _verdict(truth: str, i: int) -> str:
    # The detector filters low quality and is right on women, but calls every fourth man a
    # woman: a biased error, so its score differs from the humans'.
    if truth not in ("male", "female"):
        return "filtered"
    if truth == "male" and i % 4 == 3:
        return "female"
    return truth


@pytest.fixture(autouse=True)
def worker_in_process(request, monkeypatch):
    """The estimate worker, which the page and the API start as a process of its own, runs here
    in the test's process (and database) when they start it: a request then finds its job done.
    A test that asks for ``detached_worker`` keeps the real start (or patches it itself)."""
    if "detached_worker" in request.fixturenames:
        return
    from estimates import services

    monkeypatch.setattr(services, "estimate_worker_start", lambda: services.estimate_jobs_work())


@pytest.fixture
def detached_worker() -> None:
    """Asked for by a test that keeps the worker's real, detached start (see above)."""


@pytest.fixture
def sampled_study(study) -> SampledStudy:
    fixture = SampledStudy(study=study)
    prompts = [
        PromptFactory(study=study, category="profession", word=w, text=f"a photo of a {w}") for w in WORDS
    ]
    for m, model in enumerate(MODELS):
        for p, prompt in enumerate(prompts):
            for i in range(PER_PROMPT):
                item = ItemFactory(prompt=prompt, t2i_model=model, key=f"{model}/{prompt.word}_{i}.png")
                truth = _truth(m, p, i)
                fixture.truth[item.pk] = truth
                predict(item, "fake", "1", _verdict(truth, i))
                fixture.items.append(item)
    return fixture


@pytest.fixture
def finish_all() -> Callable[[SampledStudy, SamplingRound], int]:
    return lambda fixture, sampling_round: fixture.finish(sampling_round)


def selected_items(sampling_round: SamplingRound) -> QuerySet[Item]:
    return Item.objects.filter(pk__in=sampling_round.round_items.filter(selected=True).values("item_id"))


def finish_answers(study, truth: dict[int, dict[str, str]], done: SamplingRound | QuerySet[Item]) -> None:
    """Final labels (``truth``, question by question) where ``done``'s items (or a round's selected
    items) have none yet, for studies that ask several questions."""
    items = selected_items(done) if isinstance(done, SamplingRound) else done
    questions = {q.key: q for q in Question.objects.filter(study=study)}
    for item in items:
        for key, value in truth[item.pk].items():
            if not FinalLabel.objects.filter(item=item, question=questions[key]).exists():
                FinalLabelFactory(item=item, question=questions[key], value=value)


def estimate_after_an_api_round(
    client, finish: Callable[[SamplingRound], object], *, study: str, detector: str
) -> dict:
    """Draw a round of 12 through the API, ``finish`` it, and return the estimate the API then gives."""
    response = client.post(
        "/api/sampling-rounds/",
        {"study": study, "detector": detector, "budget": 12, "seed": 5},
        format="json",
    )
    assert response.status_code == 201, response.content
    finish(SamplingRound.objects.get())
    response = client.get("/api/estimates/", {"study": study, "detector": detector})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["study"], body["detector"], body["version"]) == (study, detector, "1")
    return body


def estimate_page_after_a_round(client, finish: Callable[[SamplingRound], object], url: str) -> str:
    """Ask the estimate page at ``url`` for a round of 12 ("Label N more"), ``finish`` it, and
    return the page then shown."""
    response = client.post(url, {"budget": "12", "design": "uniform"})
    assert response.status_code == 302, response.content.decode()[:2000]
    finish(SamplingRound.objects.get())
    return client.get(url).content.decode()
