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

from annotate.models import FinalLabel
from estimates.models import SamplingRound
from studies.models import Item
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
