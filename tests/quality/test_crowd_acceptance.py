"""Acceptance: a small crowd end to end through the commands and the join link, its figures
recomputed independently.

A researcher makes the study, imports gold and makes a join link with the management commands;
participants open the link with their PROLIFIC_PID, consent and label by posting the labeling
form (the next item's partial back) until the completion page; two of them click at random;
``recompute_finals --aggregation dawid_skene``. Then, from what the participants sent alone:
gold accuracy, its Wilson interval and both flags (statsmodels), every pair's Cohen's kappa on shared items
(scikit-learn), Dawid-Skene's answers and posteriors (crowd-kit's ``DawidSkene`` on the labels),
each annotator's reliability (the mean posterior of their answers), agreement with the finals
and the median seconds per label — compared with the API, the reliability page's CSV and the
stored finals.
"""

from __future__ import annotations

import csv
import io
import random
import re
import statistics
from collections import defaultdict
from itertools import combinations

import pandas as pd
import pytest
from crowdkit.aggregation import DawidSkene
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.proportion import proportion_confint

from annotate.models import FinalLabel, FinalLabelSource, GoldResponse, Label
from crowd.models import Participant
from quality.selectors import RELIABILITY_COLUMNS
from studies.models import Study
from tests.factories import ItemFactory, PromptFactory

pytestmark = pytest.mark.django_db

ANSWERS = ("male", "female")
ITEMS, GOLD, QUOTA, N = 48, 8, 12, 3
PARTICIPANTS, RANDOM_CLICKERS = 7, {"pid-2", "pid-5"}
CODE = "PANEL-77"


def _run(*args: str, **options: object) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def _shown(html: str) -> tuple[int, str]:
    """The item on screen and its form's request id."""
    item = re.search(r'id="current-image"[^>]*data-item-id="(\d+)"', html)
    request_id = re.search(r'name="request_id" value="([0-9a-f]+)"', html)
    assert item, html[:2000]
    assert request_id, html[:2000]
    return int(item.group(1)), request_id.group(1)


def _participate(
    path: str, pid: str, truth: dict[int, str], rng: random.Random
) -> dict[int, tuple[str, int]]:
    """One participant's visit, as their browser makes it; what they answered: item → (answer,
    milliseconds)."""
    client = Client()
    response = client.get(f"{path}?PROLIFIC_PID={pid}")
    assert response.url == reverse("crowd:guidelines")
    assert "consent" in client.get(response.url).content.decode()
    screen = client.post(reverse("crowd:guidelines"), {"consent": "yes"}).url
    html = client.get(screen).content.decode()
    sent: dict[int, tuple[str, int]] = {}
    while True:
        item_id, request_id = _shown(html)
        assert item_id not in sent, f"{pid} got item {item_id} twice"
        careful = pid not in RANDOM_CLICKERS and rng.random() < 0.9
        answer = truth[item_id] if careful else rng.choice(ANSWERS)
        sent[item_id] = (answer, rng.randint(500, 6000))
        response = client.post(
            reverse("annotate:label_submit", args=["panel", item_id]),
            {"answer_gender": answer, "request_id": request_id, "duration_ms": str(sent[item_id][1])},
            HTTP_HX_REQUEST="true",
        )
        assert response.status_code == 200
        if "HX-Redirect" in response:
            assert CODE in client.get(response["HX-Redirect"]).content.decode()
            return sent
        html = response.content.decode()


def _close(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) < 1e-9)


def test_a_crowd_through_the_join_link_gives_the_figures_sklearn_statsmodels_and_crowdkit_give(
    tmp_path, researcher, client_for, api_for
):
    rng = random.Random(5)
    _run("create_study", "panel", protocol="gender", labels_per_item=N, agreement="majority")
    study = Study.objects.get(slug="panel")
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(ITEMS)]
    truth = {item.pk: rng.choice(ANSWERS) for item in items}
    gold = {item.pk: truth[item.pk] for item in items[:: ITEMS // GOLD][:GOLD]}
    keys = {item.pk: item.key for item in items}
    gold_csv = tmp_path / "gold.csv"
    gold_csv.write_text(
        "image,question,answer\n" + "".join(f"{keys[i]},gender,{a}\n" for i, a in gold.items())
    )
    _run("import_gold", str(gold_csv), study="panel")
    _run("create_study", "panel", protocol="gender", gold_rate=0.2, min_gold_accuracy=0.8, min_gold=2)
    url = _run(
        "create_join_link",
        study="panel",
        quota=QUOTA,
        completion_url="https://app.prolific.com/submissions/complete?cc=" + CODE,
        completion_code=CODE,
    ).strip()
    path = re.sub(r"^https?://[^/]+", "", url)

    sent = {f"pid-{i}": _participate(path, f"pid-{i}", truth, rng) for i in range(PARTICIPANTS)}
    _run("recompute_finals", study="panel", aggregation="dawid_skene")
    study.refresh_from_db()

    name = dict(Participant.objects.filter(study=study).values_list("panel_id", "user__username"))
    answered = {name[pid]: answers for pid, answers in sent.items()}
    labels = {
        (username, item): answer
        for username, answers in answered.items()
        for item, (answer, _) in answers.items()
        if item not in gold
    }
    # What the participants sent is what is stored: ordinary answers as labels, gold answers apart.
    assert (
        dict(((u, i), v) for u, i, v in Label.objects.values_list("annotator__username", "item_id", "value"))
        == labels
    )
    assert {
        (u, i): v for u, i, v in GoldResponse.objects.values_list("annotator__username", "item_id", "value")
    } == {(u, i): answer for u, a in answered.items() for i, (answer, _) in a.items() if i in gold}
    assert not FinalLabel.objects.filter(item_id__in=gold).exists()

    # Dawid-Skene with crowd-kit on the labels themselves.
    frame = pd.DataFrame(
        [(item, u, v) for (u, item), v in labels.items()], columns=["task", "worker", "label"]
    )
    model = DawidSkene(n_iter=100).fit(frame)
    probas = model.probas_
    count = frame.groupby("task").size()
    expected_finals = {}
    for task, answer in model.labels_.items():
        posterior = float(probas.loc[task, answer])
        if count[task] >= N and posterior >= study.min_posterior:
            expected_finals[int(task)] = (answer, posterior)
    stored = {
        item: (value, posterior)
        for item, value, posterior in FinalLabel.objects.filter(source=FinalLabelSource.AGREED).values_list(
            "item_id", "value", "posterior"
        )
    }
    assert stored.keys() == expected_finals.keys()
    assert expected_finals, "the crowd settled no item: the comparison would prove nothing"
    for item, (answer, posterior) in expected_finals.items():
        assert stored[item][0] == answer
        assert stored[item][1] == pytest.approx(posterior, abs=1e-9)

    # Every other figure of every annotator.
    finals = {item: value for item, (value, _) in stored.items()}
    by_annotator: dict[str, dict[int, str]] = defaultdict(dict)
    for (username, item), value in labels.items():
        by_annotator[username][item] = value
    kappas: dict[frozenset[str], tuple[float | None, int]] = {}
    for a, b in combinations(sorted(by_annotator), 2):
        shared = sorted(by_annotator[a].keys() & by_annotator[b].keys())
        if shared:
            ya, yb = [by_annotator[a][i] for i in shared], [by_annotator[b][i] for i in shared]
            kappa = None if len(set(ya) | set(yb)) == 1 else float(cohen_kappa_score(ya, yb))
            kappas[frozenset((a, b))] = (kappa, len(shared))
    expected = {}
    for username, answers in answered.items():
        golds = [answer == gold[item] for item, (answer, _) in answers.items() if item in gold]
        low, high = proportion_confint(sum(golds), len(golds), method="wilson") if golds else (0.0, 1.0)
        own = by_annotator[username]
        with_final = [value == finals[item] for item, value in own.items() if item in finals]
        defined = [k for pair, (k, _) in kappas.items() if username in pair and k is not None]
        reliability = statistics.fmean(float(probas.loc[item, value]) for item, value in own.items())
        reasons = []
        if len(golds) >= 2 and sum(golds) / len(golds) < 0.8:
            reasons.append("gold")
        # Reliability credibly below the rule: the Wilson interval's upper end, after 2 answers.
        if (
            len(own) >= 2
            and proportion_confint(round(reliability * len(own)), len(own), method="wilson")[1] < 0.8
        ):
            reasons.append("reliability")
        expected[username] = {
            "labels": len(own),
            "median_seconds": statistics.median(answers[item][1] / 1000 for item in own),
            "gold_answers": len(golds),
            "gold_correct": sum(golds),
            "gold_accuracy": sum(golds) / len(golds) if golds else None,
            "gold_low": low,
            "gold_high": high,
            "flagged": bool(reasons),
            "mean_kappa": sum(defined) / len(defined) if defined else None,
            "agreement_with_final": sum(with_final) / len(with_final) if with_final else None,
            "answers_with_final": len(with_final),
            "reliability": reliability,
            "excluded": False,
            "flag_reason": "+".join(reasons),
        }

    api = api_for(researcher).get("/api/annotators/", {"study": "panel"})
    assert api.status_code == 200
    rows = {row["annotator"]: row for row in api.json()}
    assert rows.keys() == expected.keys()
    for username, figures in expected.items():
        row = rows[username]
        for column, value in figures.items():
            assert (
                _close(row[column], value)
                if isinstance(value, float) or value is None
                else (row[column] == value)
            ), (username, column, row[column], value)
        assert {
            frozenset((username, k["annotator"])): (k["kappa"], k["n"]) for k in row["kappas"]
        }.keys() == {pair for pair in kappas if username in pair}
        for k in row["kappas"]:
            kappa, n = kappas[frozenset((username, k["annotator"]))]
            assert k["n"] == n
            assert _close(k["kappa"], kappa), (username, k, kappa)

    export = client_for(researcher).get(reverse("quality:reliability", args=["panel"]), {"format": "csv"})
    table = list(csv.DictReader(io.StringIO(export.content.decode())))
    assert tuple(table[0]) == RELIABILITY_COLUMNS
    for line in table:
        for column, value in expected[line["annotator"]].items():
            text = line[column]
            if isinstance(value, bool | str):
                assert text == str(value), (line["annotator"], column, text)
            elif value is None:
                assert text == "", (line["annotator"], column, text)
            else:
                assert float(text) == pytest.approx(value, abs=1e-9), (line["annotator"], column, text)
    # The random clickers are flagged, and the model trusts them less than the careful ones. (Not
    # always each one below every careful annotator: on 12 answers one of them can be lucky,
    # depending on which items the gold draws, which depend on the accounts' ids.)
    clickers = {name[pid] for pid in RANDOM_CLICKERS}
    careful = set(expected) - clickers
    assert {u for u, figures in expected.items() if figures["flagged"]} >= clickers
    assert statistics.fmean(expected[u]["reliability"] for u in clickers) < statistics.fmean(
        expected[u]["reliability"] for u in careful
    )
