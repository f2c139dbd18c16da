"""Agreement between annotators: Cohen's and Fleiss' kappa, nominal Krippendorff's alpha, and their summary."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CohenKappa:
    """Cohen's kappa of two raters (None without items or at chance agreement 1), with its confusion."""

    kappa: float | None
    observed_agreement: float | None
    expected_agreement: float | None
    n: int
    labels: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]


def _ordered_labels(values: Iterable[str], labels: Sequence[str] | None) -> tuple[str, ...]:
    """The given label order, extended by any value seen that it lacks (in sorted order)."""
    known = list(labels or [])
    extra = sorted(set(values) - set(known))
    return tuple(known + extra)


def confusion_matrix(
    rater_a: Sequence[str], rater_b: Sequence[str], labels: Sequence[str] | None = None
) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """Label order (``labels``, then other values sorted) and counts[i][j] of A's labels[i] x B's labels[j]."""
    if len(rater_a) != len(rater_b):
        raise ValueError(f"Raters gave {len(rater_a)} and {len(rater_b)} labels; need one pair per item.")
    order = _ordered_labels([*rater_a, *rater_b], labels)
    index = {label: i for i, label in enumerate(order)}
    counts = [[0] * len(order) for _ in order]
    for a, b in zip(rater_a, rater_b, strict=True):
        counts[index[a]][index[b]] += 1
    return order, tuple(tuple(row) for row in counts)


def cohen_kappa(
    rater_a: Sequence[str], rater_b: Sequence[str], labels: Sequence[str] | None = None
) -> CohenKappa:
    """Cohen's kappa, observed agreement and confusion matrix of two raters (as scikit-learn's)."""
    order, confusion = confusion_matrix(rater_a, rater_b, labels)
    return cohen_kappa_from_confusion(confusion, order)


def cohen_kappa_from_confusion(confusion: Sequence[Sequence[int]], labels: Sequence[str]) -> CohenKappa:
    """Cohen's kappa from a square confusion matrix (rows rater A, columns rater B)."""
    table = tuple(tuple(int(x) for x in row) for row in confusion)
    if len(table) != len(labels) or any(len(row) != len(labels) for row in table):
        raise ValueError(f"Confusion matrix must be {len(labels)} x {len(labels)}, one row per label.")
    n = sum(map(sum, table))
    if n == 0:
        return CohenKappa(None, None, None, 0, tuple(labels), table)
    p_o = sum(table[i][i] for i in range(len(labels))) / n
    row_totals = [sum(row) for row in table]
    col_totals = [sum(col) for col in zip(*table, strict=True)]
    p_e = sum(r * c for r, c in zip(row_totals, col_totals, strict=True)) / (n * n)
    # p_e == 1 only when both raters used a single, identical label: kappa is 0/0.
    kappa = None if math.isclose(p_e, 1.0) else (p_o - p_e) / (1 - p_e)
    return CohenKappa(kappa, p_o, p_e, n, tuple(labels), table)


@dataclass(frozen=True)
class FleissKappa:
    """Fleiss' kappa over items with any number (≥ 2) of raters; None when undefined."""

    kappa: float | None
    observed_agreement: float | None
    expected_agreement: float | None
    n_items: int


def _item_counts(items: Iterable[Sequence[str | None]]) -> np.ndarray:
    """(items, categories) matrix: how many raters gave each category to each item."""
    units = [[v for v in item if v is not None] for item in items]
    categories = {c: i for i, c in enumerate(sorted({v for unit in units for v in unit}))}
    counts = np.zeros((len(units), max(len(categories), 1)), dtype=np.int64)
    for row, unit in enumerate(units):
        for value in unit:
            counts[row, categories[value]] += 1
    return counts


def fleiss_kappa(items: Iterable[Sequence[str]]) -> FleissKappa:
    """Fleiss' kappa of items, each given as the labels its raters chose (items with < 2 skipped)."""
    return fleiss_kappa_from_counts(_item_counts(items))


def fleiss_kappa_from_counts(counts: np.ndarray) -> FleissKappa:
    """Fleiss' kappa from an (items, categories) matrix of rater counts; rows with < 2 skipped."""
    counts = np.asarray(counts, dtype=np.int64)
    raters = counts.sum(axis=1) if counts.size else np.zeros(0, dtype=np.int64)
    keep = raters >= 2
    counts, raters = counts[keep], raters[keep]
    if len(raters) == 0:
        return FleissKappa(None, None, None, 0)
    per_item = ((counts * counts).sum(axis=1) - raters) / (raters * (raters - 1))
    p_bar = float(per_item.mean())
    p_e = float(((counts.sum(axis=0) / raters.sum()) ** 2).sum())
    kappa = None if math.isclose(p_e, 1.0) else (p_bar - p_e) / (1 - p_e)
    return FleissKappa(kappa, p_bar, p_e, len(raters))


@dataclass(frozen=True)
class KrippendorffAlpha:
    """Krippendorff's alpha for nominal data over units with at least two values; None when undefined."""

    alpha: float | None
    n_units: int
    n_values: int


def krippendorff_alpha_nominal(units: Iterable[Sequence[str | None]]) -> KrippendorffAlpha:
    """Nominal Krippendorff's alpha; each unit lists its coders' values, None where missing."""
    return krippendorff_alpha_from_counts(_item_counts(units))


def krippendorff_alpha_from_counts(counts: np.ndarray) -> KrippendorffAlpha:
    """Nominal alpha from a (units, values) matrix of how many coders gave each value."""
    counts = np.asarray(counts, dtype=np.int64)
    values = counts.sum(axis=1) if counts.size else np.zeros(0, dtype=np.int64)
    keep = values >= 2
    counts, values = counts[keep], values[keep]
    if len(values) == 0:
        return KrippendorffAlpha(None, 0, 0)
    observed = float(((values * values - (counts * counts).sum(axis=1)) / (values - 1)).sum())
    n = int(values.sum())
    totals = counts.sum(axis=0)
    expected = float(n * n - (totals * totals).sum())
    alpha = None if expected == 0 else 1 - (n - 1) * observed / expected
    return KrippendorffAlpha(alpha, len(values), n)


# --- Agreement of a whole study from its label rows -----------------------------------------------


@dataclass(frozen=True)
class KappaFacet:
    """Cohen's kappa of one slice (a T2I model, a category, a pair of raters)."""

    kappa: float | None
    observed_agreement: float | None
    n: int

    def as_dict(self) -> dict[str, Any]:
        return {"cohen_kappa": self.kappa, "observed_agreement": self.observed_agreement, "n_images": self.n}


@dataclass(frozen=True)
class RaterPair:
    """Cohen's kappa of two raters (alphabetical; rater A the first) on the items both labelled."""

    raters: tuple[str, str]
    kappa: KappaFacet


@dataclass(frozen=True)
class AgreementSummary:
    """Every agreement figure of a set of label rows (see ``agreement_summary``)."""

    labels: tuple[str, ...]
    n_labels: int
    max_labels_per_item: int
    cohen: CohenKappa
    per_t2i_model: Mapping[str, KappaFacet]
    per_category: Mapping[str, KappaFacet]
    per_rater_pair: tuple[RaterPair, ...]
    fleiss: FleissKappa
    krippendorff: KrippendorffAlpha

    @property
    def n_items(self) -> int:
        """Items with at least two labels: the ones agreement is measured on."""
        return self.cohen.n

    def as_dict(self) -> dict[str, Any]:
        """JSON types only, in the shape the agreement page, API and command show."""
        return {
            "labels": list(self.labels),
            "n_images": self.n_items,
            "n_labels": self.n_labels,
            "max_labels_per_image": self.max_labels_per_item,
            "cohen_kappa": self.cohen.kappa,
            "observed_agreement": self.cohen.observed_agreement,
            "expected_agreement": self.cohen.expected_agreement,
            "confusion": [list(row) for row in self.cohen.confusion],
            "per_t2i_model": {name: facet.as_dict() for name, facet in self.per_t2i_model.items()},
            "per_category": {name: facet.as_dict() for name, facet in self.per_category.items()},
            "per_annotator_pair": [
                {"annotators": list(pair.raters), **pair.kappa.as_dict()} for pair in self.per_rater_pair
            ],
            "fleiss_kappa": self.fleiss.kappa,
            "krippendorff_alpha": self.krippendorff.alpha,
        }


def _grouped_confusions(
    groups: np.ndarray, a: np.ndarray, b: np.ndarray, n_groups: int, k: int
) -> np.ndarray:
    """(groups, k, k) confusion matrices of label pairs (a, b), one per group index."""
    flat = np.bincount((groups * k + a) * k + b, minlength=n_groups * k * k)
    return flat.reshape(n_groups, k, k)


def _facet(confusion: np.ndarray, labels: Sequence[str]) -> KappaFacet:
    result = cohen_kappa_from_confusion(confusion.tolist(), labels)
    return KappaFacet(result.kappa, result.observed_agreement, result.n)


def agreement_summary(
    rows: Sequence[tuple[int, str, str, str, str]], *, labels: Sequence[str]
) -> AgreementSummary:
    """Agreement of (item, t2i_model, category, rater, value) ``rows``, sorted by item and rater:
    overall, per T2I model, per category and per rater pair."""
    order = _ordered_labels((r[4] for r in rows), labels)
    k = len(order)
    code = {label: i for i, label in enumerate(order)}

    items, models, categories, raters, values = (
        (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 5
    )
    item = np.asarray(items, dtype=np.int64)
    value = np.fromiter((code[v] for v in values), dtype=np.int64, count=len(values))
    starts = np.flatnonzero(np.r_[True, item[1:] != item[:-1]]) if len(item) else np.zeros(0, dtype=np.int64)
    sizes = np.diff(np.r_[starts, len(item)])
    first = starts[sizes >= 2]  # rows of each multi-labelled item's first label
    a, b = value[first], value[first + 1]

    overall = cohen_kappa_from_confusion(_grouped_confusions(np.zeros_like(a), a, b, 1, k)[0].tolist(), order)

    def facet(names: list[str]) -> dict[str, KappaFacet]:
        keys, groups = np.unique(np.asarray(names, dtype=object)[first].astype(str), return_inverse=True)
        confusions = _grouped_confusions(groups.reshape(-1), a, b, len(keys), k)
        return {str(name): _facet(confusions[g], order) for g, name in enumerate(keys)}

    # Every pair of labels on the same item: offsets 1 .. (max labels - 1) within the sorted rows.
    if rows:
        names, who = np.unique(np.asarray(raters, dtype=object).astype(str), return_inverse=True)
    else:
        names, who = np.array([], dtype=str), np.zeros(0, dtype=np.int64)
    who = np.asarray(who, dtype=np.int64).reshape(-1)
    pair_keys, pair_a, pair_b = [], [], []
    for offset in range(1, int(sizes.max(initial=0))):
        i = np.flatnonzero(item[:-offset] == item[offset:])
        lo, hi = np.minimum(who[i], who[i + offset]), np.maximum(who[i], who[i + offset])
        swap = who[i] > who[i + offset]
        pair_keys.append(lo * len(names) + hi)
        pair_a.append(np.where(swap, value[i + offset], value[i]))
        pair_b.append(np.where(swap, value[i], value[i + offset]))
    pairs: list[RaterPair] = []
    if pair_keys:
        keys, groups = np.unique(np.concatenate(pair_keys), return_inverse=True)
        confusions = _grouped_confusions(
            groups.reshape(-1), np.concatenate(pair_a), np.concatenate(pair_b), len(keys), k
        )
        pairs = [
            RaterPair(
                (str(names[key // len(names)]), str(names[key % len(names)])), _facet(confusions[g], order)
            )
            for g, key in enumerate(keys.tolist())
        ]

    multi = np.repeat(sizes >= 2, sizes)
    unit = np.repeat(np.arange(len(sizes)), sizes)[multi]
    counts = np.bincount(unit * k + value[multi], minlength=len(sizes) * k).reshape(len(sizes), k)
    counts = counts[sizes >= 2]
    return AgreementSummary(
        labels=tuple(order),
        n_labels=int(sizes[sizes >= 2].sum()),
        max_labels_per_item=int(sizes[sizes >= 2].max(initial=0)),
        cohen=overall,
        per_t2i_model=facet(models),
        per_category=facet(categories),
        per_rater_pair=tuple(pairs),
        fleiss=fleiss_kappa_from_counts(counts),
        krippendorff=krippendorff_alpha_from_counts(counts),
    )
