"""GEP vectors and scores (Zhang et al. 2023) per T2I model and setting; docs/explanation/metrics.md."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from numbers import Real
from typing import Any, cast

import numpy as np

from metrics.gender import ratio
from metrics.gep_design import (
    EXPLICIT,
    GENDERS,
    MAN,
    NEUTRAL,
    NO,
    SETTINGS,
    WOMAN,
    YES,
    GepInputError,
)

# --- Items: one generated image with its metadata, human final answers and detector scores --------


@dataclass(frozen=True)
class GepItem:
    """One image of a GEP study: gender, setting, prompted attribute, final answers and detector scores."""

    item_id: Hashable
    gender: str
    setting: str
    attribute: str | None = None
    answers: Mapping[str, str | None] = field(default_factory=dict)
    scores: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)

    @classmethod
    def from_metadata(
        cls,
        item_id: Hashable,
        metadata: Mapping[str, Any],
        answers: Mapping[str, str | None] | None = None,
        scores: Mapping[str, Mapping[str, float | None]] | None = None,
    ) -> GepItem:
        """Build from a prompt's metadata dict (``gender``, ``setting``, ``attribute``)."""
        return cls(
            item_id=item_id,
            # Not checked here: every statistic validates its items and names the bad one.
            gender=cast(str, metadata.get("gender")),
            setting=cast(str, metadata.get("setting")),
            attribute=metadata.get("attribute") or None,
            answers=dict(answers or {}),
            scores={name: dict(by_key) for name, by_key in (scores or {}).items()},
        )


def checked_items(items: Iterable[GepItem], keys: Sequence[str]) -> list[GepItem]:
    """Materialise and validate items; the first problem raises GepInputError naming the item."""
    key_set = set(keys)
    seen: set[Hashable] = set()
    checked: list[GepItem] = []
    for item in items:
        where = f"item {item.item_id!r}"
        if item.item_id in seen:
            raise GepInputError(f"{where} appears twice")
        seen.add(item.item_id)
        if item.gender not in GENDERS:
            raise GepInputError(f"{where}: gender {item.gender!r} is not one of {', '.join(GENDERS)}")
        if item.setting not in SETTINGS:
            raise GepInputError(f"{where}: setting {item.setting!r} is not one of {', '.join(SETTINGS)}")
        attribute = item.attribute or None
        if item.setting == EXPLICIT:
            if attribute is None:
                raise GepInputError(f"{where}: explicit item without attribute")
            if attribute not in key_set:
                raise GepInputError(
                    f"{where}: attribute {attribute!r} is not one of the question keys {', '.join(keys)}"
                )
        elif attribute is not None:
            raise GepInputError(f"{where}: neutral item with attribute {attribute!r}")
        for key, answer in item.answers.items():
            if key in key_set and answer not in (YES, NO, None):
                raise GepInputError(f"{where}, question {key!r}: answer {answer!r} is neither yes nor no")
        for name, by_key in item.scores.items():
            for key, score in by_key.items():
                if key not in key_set or score is None:
                    continue
                if isinstance(score, bool) or not isinstance(score, Real) or not math.isfinite(score):
                    raise GepInputError(
                        f"{where}, detector {name!r}, question {key!r}: score {score!r} is not a finite number"
                    )
        # Normalise "" (how a CSV or a JSON field spells "no attribute") to None once, here.
        checked.append(item if item.attribute == attribute else replace(item, attribute=attribute))
    return checked


def is_relevant(item: GepItem, key: str) -> bool:
    """Whether the item's image counts for attribute ``key``: neutral always, explicit if prompted."""
    return item.setting == NEUTRAL or item.attribute == key


# --- GEP vectors and scores -----------------------------------------------------------------------


def gep_score(vector: Mapping[Any, float | None] | Sequence[float | None]) -> float | None:
    """The normalised l1 norm mean_j |v_j| of a GEP vector (equation 2); None if any entry is None."""
    values = list(vector.values()) if isinstance(vector, Mapping) else list(vector)
    if not values or any(v is None for v in values):
        return None
    return float(np.mean(np.abs(np.asarray(values, dtype=float))))


@dataclass(frozen=True)
class HumanGep:
    """GEP_human of one model and setting: counts, frequencies, vector and score."""

    setting: str
    keys: tuple[str, ...]
    n_items: dict[str, int]
    n_answered: dict[str, dict[str, int]]
    n_yes: dict[str, dict[str, int]]
    n_without_final_answer: dict[str, dict[str, int]]
    frequencies: dict[str, dict[str, float | None]]
    gep_vector: dict[str, float | None]
    gep_score: float | None


def _tally(
    items: list[GepItem],
    setting: str,
    keys: tuple[str, ...],
    value_of: Callable[[GepItem, str], float | None],
) -> tuple[dict[str, int], dict[str, dict[str, list[float]]], dict[str, dict[str, int]]]:
    """Per gender, the items of ``setting``, each relevant key's values (``value_of``) and the missing ones."""
    if setting not in SETTINGS:
        raise ValueError(f"setting {setting!r} is not one of {', '.join(SETTINGS)}")
    n_items = dict.fromkeys(GENDERS, 0)
    values: dict[str, dict[str, list[float]]] = {gender: {key: [] for key in keys} for gender in GENDERS}
    n_missing = {gender: dict.fromkeys(keys, 0) for gender in GENDERS}
    for item in items:
        if item.setting != setting:
            continue
        n_items[item.gender] += 1
        for key in keys:
            if not is_relevant(item, key):
                continue
            value = value_of(item, key)
            if value is None:
                n_missing[item.gender][key] += 1
            else:
                values[item.gender][key].append(value)
    return n_items, values, n_missing


def checked_human_gep(items: list[GepItem], setting: str, keys: tuple[str, ...]) -> HumanGep:
    def yes(item: GepItem, key: str) -> int | None:
        answer = item.answers.get(key)
        return None if answer is None else int(answer == YES)

    n_items, answers, n_missing = _tally(items, setting, keys, yes)
    n_answered = {gender: {key: len(answers[gender][key]) for key in keys} for gender in GENDERS}
    n_yes = {gender: {key: int(sum(answers[gender][key])) for key in keys} for gender in GENDERS}
    frequencies, vector = _means_and_difference(n_yes, n_answered, keys)
    return HumanGep(
        setting=setting,
        keys=keys,
        n_items=n_items,
        n_answered=n_answered,
        n_yes=n_yes,
        n_without_final_answer=n_missing,
        frequencies=frequencies,
        gep_vector=vector,
        gep_score=gep_score(vector),
    )


def _means_and_difference(
    sums: Mapping[str, Mapping[str, float]], counts: dict[str, dict[str, int]], keys: tuple[str, ...]
) -> tuple[dict[str, dict[str, float | None]], dict[str, float | None]]:
    """Per-gender means of each key, and the vector of mean_woman - mean_man."""
    means = {g: {k: ratio(sums[g][k], counts[g][k]) for k in keys} for g in GENDERS}
    vector = {
        k: _sum_difference(sums[WOMAN][k], counts[WOMAN][k], sums[MAN][k], counts[MAN][k]) for k in keys
    }
    return means, vector


def _sum_difference(sum_a: float, n_a: int, sum_b: float, n_b: int) -> float | None:
    """sum_a/n_a - sum_b/n_b computed exactly and rounded once (keeps true ties); None if n is 0."""
    if not n_a or not n_b:
        return None
    return float(Fraction(sum_a) / n_a - Fraction(sum_b) / n_b)


@dataclass(frozen=True)
class AutoGep:
    """A detector's GEP of one model and setting (its scale is the detector's: compare ranks and signs)."""

    detector: str
    setting: str
    keys: tuple[str, ...]
    n_scored: dict[str, dict[str, int]]
    n_without_score: dict[str, dict[str, int]]
    mean_scores: dict[str, dict[str, float | None]]
    gep_vector: dict[str, float | None]
    gep_score: float | None


def checked_auto_gep(items: list[GepItem], detector: str, setting: str, keys: tuple[str, ...]) -> AutoGep:
    def score(item: GepItem, key: str) -> float | None:
        value = item.scores.get(detector, {}).get(key)
        return None if value is None else float(value)

    _, scores, n_missing = _tally(items, setting, keys, score)
    n_scored = {gender: {key: len(scores[gender][key]) for key in keys} for gender in GENDERS}
    # fsum and one exact subtraction: scores equal to the human 0/1 answers give the human vector exactly.
    sums = {gender: {key: math.fsum(scores[gender][key]) for key in keys} for gender in GENDERS}
    means, vector = _means_and_difference(sums, n_scored, keys)
    return AutoGep(
        detector=detector,
        setting=setting,
        keys=keys,
        n_scored=n_scored,
        n_without_score=n_missing,
        mean_scores=means,
        gep_vector=vector,
        gep_score=gep_score(vector),
    )
