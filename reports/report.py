"""Reports as plain dicts: the agreement of annotators and the bias report (issue 4's contract).

Glue only: selectors fetch aggregated rows, ``reports.metrics`` computes. The dicts hold JSON
types only (str, int, float, None, list, dict), so commands, the API and templates can use them
as they are.
"""

from __future__ import annotations

import os
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from annotate.models import Study
from annotate.selectors import label_rows_for_agreement
from reports import metrics
from reports import selectors as sel

LABEL_KEYS = ("male", "female", "low_quality", "other")
# Threads for the bootstrap intervals (see ``_map_threads``); more than the cores gains nothing.
BOOTSTRAP_THREADS = 8
T = TypeVar("T")
R = TypeVar("R")


# --------------------------------------------------------------------------------------------
# Agreement
# --------------------------------------------------------------------------------------------


def _label_order(studies: Iterable[Study]) -> list[str]:
    order: list[str] = []
    for study in studies:
        order += [v for v in study.label_values if v not in order]
    return order


def _kappa_summary(confusion: np.ndarray, labels: Sequence[str]) -> dict[str, Any]:
    result = metrics.cohen_kappa_from_confusion(confusion.tolist(), labels)
    return {
        "cohen_kappa": result.kappa,
        "observed_agreement": result.observed_agreement,
        "n_images": result.n,
    }


def _grouped_confusions(
    groups: np.ndarray, a: np.ndarray, b: np.ndarray, n_groups: int, k: int
) -> np.ndarray:
    """(groups, k, k) confusion matrices of label pairs (a, b), one per group index."""
    flat = np.bincount((groups * k + a) * k + b, minlength=n_groups * k * k)
    return flat.reshape(n_groups, k, k)


def agreement_report(
    *, study: Study | None, t2i_model: str | None = None, category: str | None = None
) -> dict[str, Any]:
    """Agreement of the annotators of a study (all studies when ``study`` is None).

    Uses the images with at least two labels. Cohen's kappa compares, per image, the labels of
    its first two annotators by annotator id (rater A = lower id); Fleiss' kappa and
    Krippendorff's alpha (nominal) use all labels of those images (with two labels per image
    they are computed too). Per annotator pair: every pair of annotators who both labelled an
    image, named in alphabetical order.

    Keys: study, labels, n_images, n_labels, max_labels_per_image, cohen_kappa,
    observed_agreement, expected_agreement, confusion (rows = rater A's label, columns = rater
    B's, both in ``labels`` order), per_t2i_model / per_category ({name: {cohen_kappa,
    observed_agreement, n_images}}), per_annotator_pair ([{annotators: [a, b], cohen_kappa,
    observed_agreement, n_images}]), fleiss_kappa, krippendorff_alpha. Undefined values are None.

    The label rows are grouped with numpy (sorted by image, then annotator id), so 250,000
    labels take a fraction of a second.
    """
    studies = [study] if study is not None else list(Study.objects.order_by("pk"))
    rows: list[tuple[int, str, str, str, str]] = []
    for s in studies:
        rows += label_rows_for_agreement(study=s, t2i_model=t2i_model, category=category)
    labels = _label_order(studies)
    labels += sorted({r[4] for r in rows} - set(labels))
    k = len(labels)
    code = {label: i for i, label in enumerate(labels)}

    image_ids, models, categories, annotators, values = (
        (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 5
    )
    image = np.asarray(image_ids, dtype=np.int64)
    value = np.fromiter((code[v] for v in values), dtype=np.int64, count=len(values))
    starts = (
        np.flatnonzero(np.r_[True, image[1:] != image[:-1]]) if len(image) else np.zeros(0, dtype=np.int64)
    )
    sizes = np.diff(np.r_[starts, len(image)])
    first = starts[sizes >= 2]  # rows of each multi-labelled image's first label
    a, b = value[first], value[first + 1]

    overall = metrics.cohen_kappa_from_confusion(
        _grouped_confusions(np.zeros_like(a), a, b, 1, k)[0].tolist(), labels
    )

    def facet(names: list[str]) -> dict[str, Any]:
        keys, groups = np.unique(np.asarray(names, dtype=object)[first].astype(str), return_inverse=True)
        confusions = _grouped_confusions(groups.reshape(-1), a, b, len(keys), k)
        return {str(name): _kappa_summary(confusions[g], labels) for g, name in enumerate(keys)}

    # Every pair of labels on the same image: offsets 1 .. (max labels - 1) within the sorted rows.
    names, who = (
        np.unique(np.asarray(annotators, dtype=object).astype(str), return_inverse=True) if rows else ([], [])
    )
    who = np.asarray(who, dtype=np.int64).reshape(-1)
    pair_keys, pair_a, pair_b = [], [], []
    for offset in range(1, int(sizes.max(initial=0))):
        i = np.flatnonzero(image[:-offset] == image[offset:])
        lo, hi = np.minimum(who[i], who[i + offset]), np.maximum(who[i], who[i + offset])
        swap = who[i] > who[i + offset]
        pair_keys.append(lo * len(names) + hi)
        pair_a.append(np.where(swap, value[i + offset], value[i]))
        pair_b.append(np.where(swap, value[i], value[i + offset]))
    per_pair = []
    if pair_keys:
        keys, groups = np.unique(np.concatenate(pair_keys), return_inverse=True)
        confusions = _grouped_confusions(
            groups.reshape(-1), np.concatenate(pair_a), np.concatenate(pair_b), len(keys), k
        )
        per_pair = [
            {
                "annotators": [str(names[key // len(names)]), str(names[key % len(names)])],
                **_kappa_summary(confusions[g], labels),
            }
            for g, key in enumerate(keys.tolist())
        ]

    multi_image = np.repeat(sizes >= 2, sizes)
    item = np.repeat(np.arange(len(sizes)), sizes)[multi_image]
    counts = np.bincount(item * k + value[multi_image], minlength=len(sizes) * k).reshape(len(sizes), k)
    counts = counts[sizes >= 2]
    return {
        "study": study.slug if study is not None else None,
        "labels": list(labels),
        "n_images": overall.n,
        "n_labels": int(sizes[sizes >= 2].sum()),
        "max_labels_per_image": int(sizes[sizes >= 2].max(initial=0)),
        "cohen_kappa": overall.kappa,
        "observed_agreement": overall.observed_agreement,
        "expected_agreement": overall.expected_agreement,
        "confusion": [list(row) for row in overall.confusion],
        "per_t2i_model": facet(models),
        "per_category": facet(categories),
        "per_annotator_pair": per_pair,
        "fleiss_kappa": metrics.fleiss_kappa_from_counts(counts).kappa,
        "krippendorff_alpha": metrics.krippendorff_alpha_from_counts(counts).alpha,
    }


# --------------------------------------------------------------------------------------------
# Bias report
# --------------------------------------------------------------------------------------------


def _seed(seed: int, *names: str) -> list[int]:
    """A seed per (model, detector), stable across runs and independent of which other models
    or detectors are in the report (so filtering the report does not move an interval)."""
    return [seed, *(zlib.crc32(name.encode()) for name in names)]


def _interval(interval: metrics.Interval | None) -> list[float] | None:
    return interval.as_list() if interval is not None else None


def _human_model(rows: list[dict[str, Any]], *, bootstrap: int, seed: int, model: str) -> dict[str, Any]:
    prompts = []
    scores: dict[int, float | None] = {}
    category_rows = []
    totals = dict.fromkeys(LABEL_KEYS, 0)
    for row in rows:
        score = metrics.prompt_bias_score(row["n_male"], row["n_female"])
        scores[row["prompt_id"]] = score
        category_rows.append((row["category"], row["prompt_id"], score))
        for label in LABEL_KEYS:
            totals[label] += row[f"n_{label}"]
        prompts.append(
            {
                "category": row["category"],
                "word": row["word"],
                "prompt": row["prompt"],
                "n_male": row["n_male"],
                "n_female": row["n_female"],
                "n_low_quality": row["n_low_quality"],
                "n_other": row["n_other"],
                "prompt_bias_score": score,
            }
        )
    counts = [(r["n_male"], r["n_female"], r["n_low_quality"] + r["n_other"]) for r in rows]
    ci = metrics.bootstrap_model_bias(counts, n_resamples=bootstrap, seed=_seed(seed, model))
    mbs = metrics.model_bias_score(scores)
    return {
        "model_bias_score": mbs.value,
        "ci95": _interval(ci) if mbs.value is not None else None,
        "categories": {c: r.value for c, r in metrics.category_bias_scores(category_rows).items()},
        "label_shares": metrics.label_shares(totals, LABEL_KEYS),
        "n_images": sum(totals.values()),
        "n_prompts_scored": mbs.n_scored,
        "prompts": prompts,
    }


def _joint_table(row: dict[str, Any]) -> np.ndarray:
    return np.array([row[key] for key in sel.JOINT_KEYS], dtype=np.int64).reshape(3, 3)


def _filtering_and_accuracy(tables: np.ndarray) -> tuple[dict[str, Any], dict[str, Any]]:
    """Filtering (eqs. 4-5) and accuracy (eq. 6) from summed joint tables [human][detector]."""
    t = tables.sum(axis=0) if tables.size else np.zeros((3, 3), dtype=np.int64)
    m, f, rest = 0, 1, 2
    filtering = metrics.filtering_metrics(
        tp=int(t[:2, :2].sum()), fp=int(t[rest, :2].sum()), fn=int(t[:2, rest].sum()), tn=int(t[rest, rest])
    )
    accuracy = metrics.classification_accuracy(
        male_correct=int(t[m, m]),
        male_total=int(t[m, :2].sum()),
        female_correct=int(t[f, f]),
        female_total=int(t[f, :2].sum()),
    )
    return (
        {
            "precision": filtering.precision,
            "recall": filtering.recall,
            "f1": filtering.f1,
            "filter_rate": filtering.filter_rate,
            "tp": filtering.tp,
            "fp": filtering.fp,
            "fn": filtering.fn,
            "tn": filtering.tn,
        },
        {
            "male": accuracy.male,
            "female": accuracy.female,
            "overall": accuracy.overall,
            "n_male": accuracy.n_male,
            "n_female": accuracy.n_female,
        },
    )


def _detector_model(
    prompt_ids: list[int], tables: np.ndarray, *, bootstrap: int, seed: list[int]
) -> dict[str, Any]:
    """One detector on one T2I model, against the human labels of the same images."""
    # tables[p][h][d]: human classes are rows, detector verdicts columns (male, female, rest).
    human_mf = tables[:, :2, :].sum(axis=2).tolist()
    detector_mf = tables[:, :, :2].sum(axis=1).tolist()
    human = {p: metrics.prompt_bias_score(m, f) for p, (m, f) in zip(prompt_ids, human_mf, strict=True)}
    detected = {p: metrics.prompt_bias_score(m, f) for p, (m, f) in zip(prompt_ids, detector_mf, strict=True)}
    human_score = metrics.model_bias_score(human).value
    detector_score = metrics.model_bias_score(detected).value
    pct = metrics.pct_difference(detector_score, human_score)
    difference = metrics.prompt_bias_score_difference(detected, human).value
    paired = metrics.bootstrap_detector_vs_human(tables, n_resamples=bootstrap, seed=seed)
    return {
        "model_bias_score": detector_score,
        "pct_diff": pct,
        "prompt_bias_score_difference": difference,
        # No interval around a value that is undefined on the data itself (e.g. pct_diff when
        # the human score is 0), even if some replicates happen to define it.
        "ci95": _interval(paired.pct_diff) if pct is not None else None,
        "model_bias_score_ci95": _interval(paired.detector) if detector_score is not None else None,
        "prompt_bias_score_difference_ci95": _interval(paired.prompt_bias_score_difference)
        if difference is not None
        else None,
        "human_model_bias_score": human_score,
        "n_images": int(tables.sum()),
    }


def _map_threads(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(item) for item in items]`` on up to ``BOOTSTRAP_THREADS`` threads.

    The bootstraps are numpy array draws, which release the GIL, so the (model, detector) pairs
    run in parallel on every core (about 2x on 2 cores). Each pair has its own seeded generator
    (``_seed``), so the results do not depend on which thread ran what.
    """
    items = list(items)
    workers = min(len(items), os.cpu_count() or 1, BOOTSTRAP_THREADS)
    if workers <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def _detectors(
    rows: list[dict[str, Any]], versions: dict[str, str], *, bootstrap: int, seed: int
) -> dict[str, Any]:
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        grouped[row["detector"]][row["t2i_model"]].append(row)
    pairs = [(key, model) for key in sorted(versions) for model in sorted(grouped.get(key, {}))]

    def one(pair: tuple[str, str]) -> dict[str, Any]:
        key, model = pair
        model_rows = grouped[key][model]
        return _detector_model(
            [r["prompt_id"] for r in model_rows],
            np.array([_joint_table(r) for r in model_rows], dtype=np.int64),
            bootstrap=bootstrap,
            seed=_seed(seed, model, key),
        )

    per_pair = dict(zip(pairs, _map_threads(one, pairs), strict=True))
    report: dict[str, Any] = {}
    for key in sorted(versions):
        per_model_rows = grouped.get(key, {})
        all_tables = [_joint_table(r) for rs in per_model_rows.values() for r in rs]
        filtering, accuracy = _filtering_and_accuracy(np.array(all_tables, dtype=np.int64))
        report[key] = {
            "version": versions[key],
            "filtering": filtering,
            "accuracy": accuracy,
            "per_model": {model: per_pair[(key, model)] for model in sorted(per_model_rows)},
        }
    return report


def bias_report(
    *,
    study: Study | None = None,
    t2i_model: str | None = None,
    detector: str | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The bias report of issue 4 (the JSON contract of ``manage.py bias_report``).

    ``{"coverage": {images, final_labels}, "agreement": {cohen_kappa, n_images},
    "human": {t2i_model: {model_bias_score, ci95, categories, label_shares, prompts, ...}},
    "detectors": {detector: {filtering, accuracy, per_model: {t2i_model: {model_bias_score,
    pct_diff, prompt_bias_score_difference, ci95, ...}}}}}``

    - Human scores use every image with a final label. Clear = final label male or female.
    - Detector metrics use the images with both a final label and an ``ok`` prediction of the
      detector's reported version (the latest run, see ``reports.selectors``). Filtering treats
      every non-clear final label (low quality, other) as a negative.
    - ``pct_diff`` (percent, signed: + = overestimate) and ``prompt_bias_score_difference``
      compare the detector with the human labels *of the same images*
      (``human_model_bias_score``), so a detector that skipped images is not blamed for them.
    - ``ci95`` of a human model is the 95 % bootstrap interval of its model bias score; ``ci95``
      of a detector's model is the interval of ``pct_diff`` (the detector - human difference),
      with ``model_bias_score_ci95`` and ``prompt_bias_score_difference_ci95`` beside it. Images
      are resampled within prompts (``bootstrap`` replicates, seeded by ``seed``); 0 turns
      intervals off (null).
    - Ratios are fractions in [0, 1]; anything undefined is None (JSON null), never 0.
    """
    return _bias_report(study=study, t2i_model=t2i_model, detector=detector, bootstrap=bootstrap, seed=seed)[
        0
    ]


PromptCounts = dict[tuple[str, str, str, str, str], tuple[int, int, int]]


def bias_report_with_prompt_counts(
    *,
    study: Study | None = None,
    t2i_model: str | None = None,
    detector: str | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
) -> tuple[dict[str, Any], PromptCounts]:
    """``bias_report`` and, from the same prediction scan, every detector's counts per prompt:
    (category, word, prompt, t2i_model, detector) -> (n_male, n_female, n_predicted) on images
    with a final label, reported version, ok predictions only (the shape of
    ``reports.drilldown.detector_prompt_counts``, which would scan the predictions again).
    """
    report, human_rows, joint = _bias_report(
        study=study, t2i_model=t2i_model, detector=detector, bootstrap=bootstrap, seed=seed
    )
    prompts = {r["prompt_id"]: (r["category"], r["word"], r["prompt"]) for r in human_rows}
    counts: PromptCounts = {}
    for row in joint:
        table = _joint_table(row)
        key = (*prompts[row["prompt_id"]], row["t2i_model"], row["detector"])
        counts[key] = (int(table[:, 0].sum()), int(table[:, 1].sum()), int(table.sum()))
    return report, counts


def _bias_report(
    *, study: Study | None, t2i_model: str | None, detector: str | None, bootstrap: int, seed: int
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The report, the human rows and the detectors' joint rows it was computed from."""
    rows = sel.human_prompt_counts(study=study, t2i_model=t2i_model)
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_model[row["t2i_model"]].append(row)
    agreement = agreement_report(study=study, t2i_model=t2i_model)
    versions, joint = sel.detector_joint_counts(study=study, t2i_model=t2i_model, detector=detector)
    models = sorted(by_model)
    human = _map_threads(
        lambda model: _human_model(by_model[model], bootstrap=bootstrap, seed=seed, model=model), models
    )
    report = {
        "coverage": sel.coverage(study=study, t2i_model=t2i_model),
        "agreement": {"cohen_kappa": agreement["cohen_kappa"], "n_images": agreement["n_images"]},
        "human": dict(zip(models, human, strict=True)),
        "detectors": _detectors(joint, versions, bootstrap=bootstrap, seed=seed),
    }
    return report, rows, joint
