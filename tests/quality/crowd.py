"""A simulated crowd labelling a study through the services, as the labeling screen does:
careful annotators right with a probability of their own, random clickers, gold items served
at the study's rate. Shared by tests/quality/test_crowd.py (small) and bench/bench_crowd.py
(30 annotators on 600 items)."""

from __future__ import annotations

import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count

from annotate import services
from annotate.models import FinalLabel, FinalLabelSource, GoldResponse, Label
from metrics.truth import crowdkit_fit
from quality.selectors import gold_scores, reliability_report
from quality.services import annotator_exclude, finals_recompute, gold_import
from studies.models import GoldAnswer, Item, Study
from studies.services import GoldRule, study_define

ANSWERS = ("male", "female")


@dataclass
class Crowd:
    study: Study
    truth: dict[int, str]  # item id → the simulation's true answer
    random_clickers: set[str]
    accuracy: dict[str, float]
    rng: random.Random
    figures: dict[str, Any] = field(default_factory=dict)


def crowd_build(
    *,
    slug: str,
    items: int,
    annotators: int,
    random_clickers: int,
    labels_per_item: int,
    gold_rate: float,
    seed: int,
) -> Crowd:
    """A gender study of ``items`` items (no image files: the queue needs none), a share
    ``gold_rate`` of them gold, ``annotators`` members of whom ``random_clickers`` click at random."""
    rng = random.Random(seed)
    study = study_define(
        slug=slug, protocol="gender", labels_per_item=labels_per_item, agreement="majority"
    ).study
    made = Item.objects.bulk_create(Item(study=study, key=f"crowd/{i:05d}.png") for i in range(items))
    truth = {item.pk: rng.choice(ANSWERS) for item in made}
    gold = rng.sample(made, max(1, round(items * gold_rate)))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gold.csv"
        path.write_text(
            "image,question,answer\n" + "".join(f"{item.key},gender,{truth[item.pk]}\n" for item in gold),
            encoding="utf-8",
        )
        gold_import(study=study, csv_path=path)
    study_define(
        slug=slug,
        protocol="gender",
        gold=GoldRule(rate=gold_rate, min_accuracy=0.8, min_gold=min(5, len(gold))),
    )
    study.refresh_from_db()
    users = [get_user_model().objects.create(username=f"{slug}-w{i:02d}") for i in range(annotators)]
    study.annotators.add(*users)
    clickers = {user.username for user in rng.sample(users, random_clickers)}
    accuracy = {
        user.username: 0.5 if user.username in clickers else rng.uniform(0.85, 0.98) for user in users
    }
    return Crowd(study=study, truth=truth, random_clickers=clickers, accuracy=accuracy, rng=rng)


def _answer(crowd: Crowd, username: str, item_id: int) -> str:
    if username in crowd.random_clickers:
        return crowd.rng.choice(ANSWERS)
    right = crowd.truth[item_id]
    return right if crowd.rng.random() < crowd.accuracy[username] else next(a for a in ANSWERS if a != right)


def crowd_label(crowd: Crowd) -> int:
    """Every member labels their next item, in a new random order each round (people arrive
    in no fixed order), through the key press's service, until nobody has work left. How many
    submits."""
    study = crowd.study
    members = list(study.annotators.order_by("username"))
    queues = {
        user.pk: services.assignment_queue(study=study, annotator=user, size=2, gold=True) for user in members
    }
    submits = 0
    while any(queues.values()):
        crowd.rng.shuffle(members)
        for user in members:
            queue = queues[user.pk]
            if not queue:
                continue
            item_id = queue[0].item.pk
            queues[user.pk] = services.annotation_submit_next(
                study=study,
                annotator=user,
                item_id=item_id,
                answers={"gender": _answer(crowd, user.username, item_id)},
                duration_ms=crowd.rng.randint(800, 4000),
            ).queue
            submits += 1
    return submits


def finals_accuracy(crowd: Crowd) -> tuple[float, int]:
    """(Share of the ordinary items whose final answer is the true one — a dispute counts as
    wrong —, how many ordinary items)."""
    ordinary = set(crowd.truth) - set(GoldAnswer.objects.values_list("item_id", flat=True))
    finals = dict(FinalLabel.objects.filter(item__study=crowd.study).values_list("item_id", "value"))
    right = sum(finals.get(item_id) == crowd.truth[item_id] for item_id in ordinary)
    return right / len(ordinary), len(ordinary)


def label_rows(study: Study) -> list[tuple[Any, str, str]]:
    return [
        ((item_id, question_id), username, value)
        for item_id, question_id, username, value in Label.objects.filter(item__study=study)
        .order_by("id")
        .values_list("item_id", "question_id", "annotator__username", "value")
    ]


def crowd_run(crowd: Crowd) -> dict[str, Any]:
    """The whole scenario; returns its figures (see bench/bench_crowd.py)."""
    study = crowd.study
    started = time.perf_counter()
    figures: dict[str, Any] = {"submits": crowd_label(crowd)}
    figures["seconds_labelling"] = time.perf_counter() - started
    figures["gold_responses"] = GoldResponse.objects.filter(item__study=study).count()
    # What the reliability page flags after labeling (majority: reliability is agreement with the finals).
    flags = {
        row.username: row.flag_reasons for row in reliability_report(study=study).rows if row.flag_reasons
    }
    figures["flagged_gold"] = {name for name, reasons in flags.items() if "gold" in reasons}
    figures["flagged_reliability"] = {name for name, reasons in flags.items() if "reliability" in reasons}
    figures["gold_answers"] = {name: score.n for name, score in gold_scores(study=study).items()}
    figures["majority_accuracy"] = finals_accuracy(crowd)[0]
    # Dawid-Skene on the same labels, its argmax as the final answer (binary: posterior >= 0.5).
    rows = label_rows(study)
    started = time.perf_counter()
    finals_recompute(study=study, actor="bench", rule="dawid_skene", min_posterior=0.5)
    figures["seconds_dawid_skene"] = time.perf_counter() - started
    figures["dawid_skene_accuracy"] = finals_accuracy(crowd)[0]
    units = list(dict.fromkeys(unit for unit, _, _ in rows))
    labels, probas = crowdkit_fit(rows, "dawid_skene")
    stored = {
        (f.item_id, f.question_id): (f.value, f.posterior)
        for f in FinalLabel.objects.filter(item__study=study, source=FinalLabelSource.AGREED)
    }
    expected = {
        units[task]: (str(label), float(probas.loc[task, label]))
        for task, label in labels.items()
        if float(probas.loc[task, label]) >= 0.5
    }
    counts = {unit: sum(1 for u, _, _ in rows if u == unit) for unit in units}
    expected = {unit: answer for unit, answer in expected.items() if counts[unit] >= study.labels_per_item}
    figures["stored_equals_crowdkit"] = stored.keys() == expected.keys() and all(
        stored[unit][0] == expected[unit][0] and abs(stored[unit][1] - expected[unit][1]) < 1e-9
        for unit in expected
    )
    # What the page flags once the model ran: gold, and the model's reliability.
    report = {row.username: row for row in reliability_report(study=study).rows}
    flags = {name: row.flag_reasons for name, row in report.items() if row.flag_reasons}
    figures["flagged"] = set(flags)
    figures["flagged_reliability_model"] = {
        name for name, reasons in flags.items() if "reliability" in reasons
    }
    lowest = sorted(report.values(), key=lambda row: row.reliability if row.reliability is not None else 2)
    figures["least_reliable"] = {row.username for row in lowest[: len(crowd.random_clickers)]}
    # Back to the majority rule, exclude the annotators flagged after the model ran, let the others relabel.
    finals_recompute(study=study, actor="bench", rule="majority")
    for username in sorted(figures["flagged"]):
        annotator_exclude(
            study=study,
            annotator=get_user_model().objects.get(username=username),
            actor="bench",
            reason="+".join(flags[username]),
        )
    figures["submits_after"] = crowd_label(crowd)
    figures["majority_accuracy_after"] = finals_accuracy(crowd)[0]
    gold_ids = set(GoldAnswer.objects.filter(item__study=study).values_list("item_id", flat=True))
    figures["gold_in_labels"] = (
        Label.objects.filter(item_id__in=gold_ids).count()
        + FinalLabel.objects.filter(item_id__in=gold_ids).count()
    )
    figures["over_full"] = sum(
        1
        for n in Label.objects.filter(item__study=study)
        .values("item_id")
        .annotate(n=Count("id"))
        .values_list("n", flat=True)
        if n > study.labels_per_item
    )
    crowd.figures = figures
    return figures
