"""The gender bias report as a plain dict of JSON types."""

from __future__ import annotations

import os
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, TypeVar, cast

import numpy as np

from annotate.agreement import agreement_report
from detectors.kinds import KIND_GENDER
from metrics import gender as metrics
from protocols.gender import contract
from protocols.gender import selectors as gsel
from protocols.gender import tables as gtables
from reports import judges
from reports import selectors as sel
from studies.models import Question

# Threads for the bootstrap intervals (see ``_map_threads``); more than the cores gains nothing.
BOOTSTRAP_THREADS = 8
T = TypeVar("T")
R = TypeVar("R")

# (category, word, prompt, t2i_model, detector) -> (n_first, n_second, n_predicted)
PromptCounts = dict[tuple[str, str, str, str, str], tuple[int, int, int]]


@dataclass(frozen=True)
class GenderResult:
    """A computed gender report with what its pages need besides the JSON."""

    report: contract.GenderReport
    labels: tuple[tuple[str, str], ...]
    clear: tuple[str, str]
    prompt_counts: PromptCounts
    prompt_ids: dict[tuple[str, str, str], int]
    category: str | None = None

    def grid(self) -> gtables.PromptGrid:
        """Prompts x (T2I model, source) prompt bias scores (paper table 7)."""
        return gtables.prompt_grid(
            self.report,
            self.prompt_counts,
            clear=self.clear,
            prompt_ids=self.prompt_ids,
            detectors=gtables.detector_keys(self.report),
            category=self.category,
        )


def _seed(seed: int, *names: str) -> list[int]:
    """A seed per (model, detector), independent of the other models and detectors in the report."""
    return [seed, *(zlib.crc32(name.encode()) for name in names)]


def _interval(interval: metrics.Interval | None) -> list[float] | None:
    return interval.as_list() if interval is not None else None


def _map_threads(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(item) for item in items]`` on up to ``BOOTSTRAP_THREADS`` threads (numpy releases the GIL)."""
    items = list(items)
    workers = min(len(items), os.cpu_count() or 1, BOOTSTRAP_THREADS)
    if workers <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def _human_model(
    rows: list[dict[str, Any]],
    labels: tuple[str, ...],
    clear: tuple[str, str],
    *,
    bootstrap: int,
    seed: list[int],
) -> contract.HumanModel:
    first, second = clear
    prompts = []
    scores: dict[int | None, float | None] = {}
    category_rows = []
    totals = dict.fromkeys(labels, 0)
    counts = []
    for row in rows:
        n_first, n_second = row["counts"].get(first, 0), row["counts"].get(second, 0)
        n_all = sum(row["counts"].values())
        score = metrics.prompt_bias_score(n_first, n_second)
        scores[row["prompt_id"]] = score
        category_rows.append((row["category"], row["prompt_id"], score))
        counts.append((n_first, n_second, n_all - n_first - n_second))
        for value, n in row["counts"].items():
            totals[value] += n
        prompts.append(
            {
                "category": row["category"],
                "word": row["word"],
                "prompt": row["prompt"],
                **{f"n_{value}": row["counts"].get(value, 0) for value in labels},
                "prompt_bias_score": score,
            }
        )
    mbs = metrics.model_bias_score(scores)
    ci = (
        metrics.bootstrap_model_bias(counts, n_resamples=bootstrap, seed=seed)
        if mbs.value is not None
        else None
    )
    return {
        "model_bias_score": mbs.value,
        "ci95": _interval(ci),
        "categories": {c: r.value for c, r in metrics.category_bias_scores(category_rows).items()},
        "label_shares": metrics.label_shares(totals, labels),
        "n_images": sum(totals.values()),
        "n_prompts_scored": mbs.n_scored,
        "prompts": prompts,
    }


def _detectors(
    rows: list[dict[str, Any]], versions: dict[str, str], *, bootstrap: int, seed: int
) -> dict[str, contract.Detector]:
    grouped: dict[str, dict[str, dict[int | None, list[list[int]]]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        grouped[row["detector"]][row["t2i_model"]][row["prompt_id"]] = row["table"]
    pairs = [(key, model) for key in sorted(versions) for model in sorted(grouped.get(key, {}))]

    def one(pair: tuple[str, str]) -> contract.DetectorModel:
        """One detector on one T2I model, against the human labels of the same images."""
        key, model = pair
        result = metrics.detector_vs_human(
            grouped[key][model], n_resamples=bootstrap, seed=_seed(seed, model, key)
        )
        return {
            "model_bias_score": result.model_bias_score,
            "pct_diff": result.pct_diff,
            "prompt_bias_score_difference": result.prompt_bias_score_difference,
            "ci95": _interval(result.pct_diff_ci),
            "model_bias_score_ci95": _interval(result.model_bias_score_ci),
            "prompt_bias_score_difference_ci95": _interval(result.prompt_bias_score_difference_ci),
            "human_model_bias_score": result.human_model_bias_score,
            "n_images": result.n_images,
        }

    per_pair = dict(zip(pairs, _map_threads(one, pairs), strict=True))
    report: dict[str, contract.Detector] = {}
    for key in sorted(versions):
        per_model = grouped.get(key, {})
        # Filtering (eqs. 4-5) and accuracy (eq. 6) from the joint table summed over models and prompts.
        tables = [
            np.asarray(t, dtype=np.int64) for by_prompt in per_model.values() for t in by_prompt.values()
        ]
        total = sum(tables, np.zeros((metrics.N_CLASSES, metrics.N_CLASSES), dtype=np.int64))
        report[key] = {
            "version": versions[key],
            "filtering": cast("contract.Filtering", asdict(metrics.filtering_from_joint(total))),
            "accuracy": cast("contract.Accuracy", asdict(metrics.accuracy_from_joint(total))),
            "per_model": {model: per_pair[(key, model)] for model in sorted(per_model)},
        }
    return report


def compute(
    scope: sel.Scope,
    *,
    question: Question,
    detector: str | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
) -> GenderResult:
    """The gender report of the items in scope; see ``GenderAnalysis.compute``."""
    clear = metrics.check_clear_values(question.clear_values)
    # Final labels of the whole study: detector versions are of the study, human counts of the category.
    finals = gsel.final_rows(scope.narrowed(category=None), question=question)
    rows = gsel.human_prompt_counts(scope.study, finals, category=scope.category)
    named = [(value, question.display(value)) for value in question.values]
    labels = gtables.with_seen(named, (value for row in rows for value in row["counts"]))
    values = tuple(value for value, _ in labels)
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_model[row["t2i_model"]].append(row)
    agreement = agreement_report(
        study=scope.study, question=question, t2i_model=scope.t2i_model, category=scope.category
    )
    # Versions picked over the whole study (a category must not bring back an older run), then narrowed.
    versions, joint = gsel.detector_joint_counts(
        scope.narrowed(category=None), finals=finals, clear=clear, detector=detector
    )
    if scope.category:
        in_category = {row["prompt_id"] for row in rows}
        joint = [row for row in joint if row["prompt_id"] in in_category]
    models = sorted(by_model)
    human = _map_threads(
        lambda model: _human_model(
            by_model[model], values, clear, bootstrap=bootstrap, seed=_seed(seed, model)
        ),
        models,
    )
    # Every gender run against the final answers on clear images (the whole study's runs).
    runs = judges.judge_runs(
        scope.narrowed(category=None),
        kinds=[KIND_GENDER],
        read=judges.gender_reader(clear, question.key),
        detector=detector,
    )
    by_item = {item_id: {question.key: value} for item_id, value, _model, _prompt in finals}
    judged = judges.judged([(question.key, clear)], runs, by_item)
    report: contract.GenderReport = {
        # The final labels in scope: those ``rows`` counted (the same filter).
        "coverage": sel.coverage(scope, final_labels=sum(sum(r["counts"].values()) for r in rows)),
        "agreement": {"cohen_kappa": agreement["cohen_kappa"], "n_images": agreement["n_images"]},
        "human": dict(zip(models, human, strict=True)),
        "detectors": _detectors(joint, versions, bootstrap=bootstrap, seed=seed),
        "judges": {name: f for name, f in judged["judges"].items() if f},
        "judge_versions": judged["judge_versions"],
    }
    prompts = {r["prompt_id"]: (r["category"], r["word"], r["prompt"]) for r in rows}
    counts: PromptCounts = {}
    for row in joint:
        if row["prompt_id"] not in prompts:
            continue
        table = row["table"]
        key = (*prompts[row["prompt_id"]], row["t2i_model"], row["detector"])
        counts[key] = (sum(r[0] for r in table), sum(r[1] for r in table), sum(map(sum, table)))
    prompt_ids = {text: pid for pid, text in prompts.items() if pid is not None}
    return GenderResult(report, labels, clear, counts, prompt_ids, scope.category)
