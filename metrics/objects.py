"""Statistics of the object co-occurrence study (Mannering 2023): the gender x class table, its χ²
test, a paired permutation test and the human check (docs/explanation/metrics.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Generic, TypeVar

import numpy as np

from metrics.coco_names import coco_class_index, normalise_class_name

T = TypeVar("T")

#: Row order of every table here.
GENDERS: tuple[str, str] = ("male", "female")
PERSON = "person"
#: Default number of random relabellings of the paired permutation test.
DEFAULT_N_PERMUTATIONS = 9999
#: Largest number of pairs whose 2**n relabellings ``exact=True`` will enumerate.
MAX_EXACT_PAIRS = 20
# "At least as extreme" within a relative tolerance: equal tables may differ in the last bits.
_RELATIVE_TOLERANCE = 1e-9
# Random numbers drawn per chunk of relabellings: bounds memory (8 bytes each) whatever n_pairs.
_CHUNK_DRAWS = 1 << 22


@dataclass(frozen=True)
class ByGender(Generic[T]):
    """One value per gender group, in the fixed order male, female."""

    male: T
    female: T

    def as_dict(self) -> dict[str, T]:
        """``{"male": ..., "female": ...}``, the JSON shape."""
        return {"male": self.male, "female": self.female}


# --- the contingency table and its χ² test ------------------------------------------------------
@dataclass(frozen=True)
class ClassStats:
    """One column of the table: per gender its count, shares and adjusted residual."""

    name: str
    counts: ByGender[int]
    share_of_gender: ByGender[float | None]
    share_of_class: ByGender[float]
    residual: ByGender[float | None]


@dataclass(frozen=True)
class GenderContingency:
    """A 2 x K table of instance counts and its χ² test (all None, with ``reason``, when undefined)."""

    classes: tuple[str, ...]
    male: tuple[int, ...]
    female: tuple[int, ...]
    n_instances: ByGender[int]
    includes_person: bool
    chi2: float | None
    dof: int | None
    p_value: float | None
    cramers_v: float | None
    yates_correction: bool
    reason: str | None
    per_class: Mapping[str, ClassStats] = field(default_factory=dict)

    def counts_dict(self) -> dict[str, dict[str, int]]:
        """``{class: {"male": n, "female": n}}`` for every column."""
        return {name: stats.counts.as_dict() for name, stats in self.per_class.items()}

    def residuals_dict(self) -> dict[str, dict[str, float | None]]:
        """``{class: {"male": r, "female": r}}``: adjusted standardised residuals (or ``None``)."""
        return {name: stats.residual.as_dict() for name, stats in self.per_class.items()}


CountsInput = Mapping[str, "tuple[int, int] | Sequence[int] | Mapping[str, int]"]


def chi_square_by_gender(
    counts: CountsInput,
    *,
    include_person: bool = True,
    yates_correction: bool = False,
) -> GenderContingency:
    """Pearson's χ² test of independence between prompt gender and object class; ``counts`` maps a
    class name to ``(male, female)`` or ``{"male": n, "female": n}``."""
    parsed = _parse_counts(counts)
    kept = {
        name: pair for name, pair in parsed.items() if sum(pair) > 0 and (include_person or name != PERSON)
    }
    classes = tuple(sorted(kept, key=coco_class_index))
    male = tuple(kept[name][0] for name in classes)
    female = tuple(kept[name][1] for name in classes)
    totals = ByGender(sum(male), sum(female))

    reason = _undefined_reason(len(classes), totals)
    chi2 = p_value = cramers_v = None
    dof: int | None = None
    applied_yates = False
    residuals: np.ndarray | None = None
    if reason is None:
        from scipy.stats import chi2_contingency  # here, not at the top (docs/explanation/web-side.md)

        table = np.array([male, female], dtype=np.int64)
        result = chi2_contingency(table, correction=yates_correction)
        dof = int(result.dof)
        applied_yates = yates_correction and dof == 1
        chi2 = float(result.statistic)
        p_value = float(result.pvalue)
        residuals = adjusted_residuals(table)
        uncorrected = float(chi2_contingency(table, correction=False).statistic) if applied_yates else chi2
        cramers_v = math.sqrt(uncorrected / (totals.male + totals.female))

    per_class = {
        name: _class_stats(name, j, male, female, totals, residuals) for j, name in enumerate(classes)
    }
    return GenderContingency(
        classes=classes,
        male=male,
        female=female,
        n_instances=totals,
        includes_person=include_person,
        chi2=chi2,
        dof=dof,
        p_value=p_value,
        cramers_v=cramers_v,
        yates_correction=applied_yates,
        reason=reason,
        per_class=per_class,
    )


def adjusted_residuals(table: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    """Adjusted standardised residuals (O - E) / sqrt(E (1 - r/N) (1 - c/N)) of an r x c table."""
    observed = np.asarray(table, dtype=np.float64)
    if observed.ndim != 2 or min(observed.shape) < 2:
        raise ValueError("adjusted residuals need a table with at least two rows and two columns")
    rows = observed.sum(axis=1, keepdims=True)
    cols = observed.sum(axis=0, keepdims=True)
    if (rows == 0).any() or (cols == 0).any():
        raise ValueError("adjusted residuals are undefined for a table with an empty row or column")
    total = observed.sum()
    expected = rows * cols / total
    return (observed - expected) / np.sqrt(expected * (1 - rows / total) * (1 - cols / total))


def _undefined_reason(n_classes: int, totals: ByGender[int]) -> str | None:
    if n_classes == 0:
        return "no object instance was counted"
    for gender in GENDERS:
        if getattr(totals, gender) == 0:
            return f"no object instance for {gender} prompts: χ² compares the two genders' distributions"
    if n_classes < 2:
        return "fewer than two object classes: χ² needs at least two columns"
    return None


def _class_stats(
    name: str,
    j: int,
    male: tuple[int, ...],
    female: tuple[int, ...],
    totals: ByGender[int],
    residuals: np.ndarray | None,
) -> ClassStats:
    m, f = male[j], female[j]
    column = m + f  # > 0: empty columns were dropped
    return ClassStats(
        name=name,
        counts=ByGender(m, f),
        share_of_gender=ByGender(
            m / totals.male if totals.male else None, f / totals.female if totals.female else None
        ),
        share_of_class=ByGender(m / column, f / column),
        residual=(
            ByGender(None, None)
            if residuals is None
            else ByGender(float(residuals[0, j]), float(residuals[1, j]))
        ),
    )


def _parse_counts(counts: CountsInput) -> dict[str, tuple[int, int]]:
    parsed: dict[str, tuple[int, int]] = {}
    spelled: dict[str, str] = {}
    for raw_name, value in counts.items():
        name = normalise_class_name(raw_name)
        if name in parsed:
            raise ValueError(f"counts name the class {name!r} twice ({spelled[name]!r} and {raw_name!r})")
        if isinstance(value, Mapping):
            missing = [g for g in GENDERS if g not in value]
            if missing:
                raise ValueError(f"counts[{raw_name!r}] lacks {', '.join(missing)}")
            pair: tuple[int, ...] = (value["male"], value["female"])
        else:
            pair = tuple(value)
            if len(pair) != 2:
                raise ValueError(f"counts[{raw_name!r}] must be a (male, female) pair, got {value!r}")
        parsed[name] = (
            _count(pair[0], f"counts[{raw_name!r}].male"),
            _count(pair[1], f"counts[{raw_name!r}].female"),
        )
        spelled[name] = raw_name
    return parsed


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{where} must be a whole number, got {value!r}")
    if value < 0:
        raise ValueError(f"{where} must not be negative, got {value}")
    return int(value)


# --- the paired permutation test ----------------------------------------------------------------
@dataclass(frozen=True)
class PairedPermutationResult:
    """Result of ``paired_permutation_test``; ``p_value`` is None with a ``reason`` when undefined."""

    statistic: float | None
    p_value: float | None
    n_permutations: int
    n_pairs: int
    n_incomplete_pairs: int
    seed: int | None
    exact: bool
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        """Plain-data form for the JSON report."""
        return asdict(self)


def paired_permutation_test(
    male_counts: Sequence[Sequence[int]] | np.ndarray,
    female_counts: Sequence[Sequence[int]] | np.ndarray,
    *,
    n_permutations: int = DEFAULT_N_PERMUTATIONS,
    seed: int | np.random.Generator = 0,
    exact: bool = False,
) -> PairedPermutationResult:
    """Permutation test of gender/object independence within seed-matched pairs (Monte Carlo or exact)."""
    male = _count_matrix(male_counts, "male_counts")
    female = _count_matrix(female_counts, "female_counts")
    if male.shape != female.shape:
        raise ValueError(
            f"male_counts and female_counts must have the same shape, got {male.shape} and {female.shape}"
        )
    if not exact and (isinstance(n_permutations, bool) or n_permutations < 1):
        raise ValueError(f"n_permutations must be at least 1, got {n_permutations}")
    n_pairs = male.shape[0]
    if exact and n_pairs > MAX_EXACT_PAIRS:
        raise ValueError(
            f"exact enumeration of {n_pairs} pairs means 2**{n_pairs} relabellings; "
            f"use at most {MAX_EXACT_PAIRS} pairs or the Monte Carlo test"
        )
    seed_value = None if isinstance(seed, np.random.Generator) else int(seed)

    def undefined(reason: str) -> PairedPermutationResult:
        return PairedPermutationResult(None, None, 0, n_pairs, 0, seed_value, exact, reason)

    if n_pairs == 0:
        return undefined("no pairs")
    columns = male.sum(axis=0) + female.sum(axis=0)
    keep = columns > 0
    if keep.sum() < 2:
        return undefined("fewer than two object classes with instances in the pairs")
    male, female = male[:, keep], female[:, keep]
    column_totals = columns[keep].astype(np.float64)
    base = male.sum(axis=0).astype(np.float64)
    if base.sum() == 0 or base.sum() == column_totals.sum():
        return undefined("one gender has no object instance in the pairs")
    diff = (male - female).astype(np.float64)
    observed = float(_chi2_of_male_rows(base[np.newaxis, :], column_totals)[0])
    threshold = observed - _RELATIVE_TOLERANCE * abs(observed)

    # Exact: every one of the 2**n relabellings, numbered by the bits of a code; else random ones.
    drawn = 1 << n_pairs if exact else n_permutations
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    bits = np.arange(n_pairs, dtype=np.int64)
    step = max(1, _CHUNK_DRAWS // n_pairs)
    extreme = 0
    for start in range(0, drawn, step):
        size = min(step, drawn - start)
        if exact:
            codes = np.arange(start, start + size, dtype=np.int64)
            swaps = ((codes[:, np.newaxis] >> bits) & 1).astype(np.float64)
        else:
            # One 64-bit draw per number: the p-value does not depend on the chunking.
            swaps = (rng.random((size, n_pairs)) < 0.5).astype(np.float64)
        stats = _chi2_of_male_rows(base - swaps @ diff, column_totals)
        extreme += int(np.count_nonzero(stats >= threshold))
    p_value = extreme / drawn if exact else (1 + extreme) / (1 + drawn)
    return PairedPermutationResult(observed, p_value, drawn, n_pairs, 0, seed_value, exact, None)


def _chi2_of_male_rows(male_rows: np.ndarray, column_totals: np.ndarray) -> np.ndarray:
    """χ² of 2 x K tables given their male rows and the shared column totals."""
    n = column_totals.sum()
    r1 = male_rows.sum(axis=1)
    r2 = n - r1
    deviation = male_rows - np.outer(r1, column_totals) / n
    spread = (deviation**2 / column_totals).sum(axis=1)
    denominator = r1 * r2
    out = np.zeros_like(r1)
    np.divide(n * n * spread, denominator, out=out, where=denominator > 0)
    return out


def _count_matrix(values: Sequence[Sequence[int]] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim == 1 and array.size == 0:  # [] is "no pairs", not a 1-D table
        array = array.reshape(0, 0)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (pairs x classes), got {array.ndim} dimension(s)")
    if array.dtype.kind not in "iuf" or (array.dtype.kind == "f" and not np.isfinite(array).all()):
        raise ValueError(f"{name} must hold whole numbers")
    if array.dtype.kind == "f" and (array != np.round(array)).any():
        raise ValueError(f"{name} must hold whole numbers")
    if (array < 0).any():
        raise ValueError(f"{name} must not hold negative counts")
    return array.astype(np.int64)


# --- images → analysis --------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageObjects:
    """One generated image: its prompt's gender, one class name per instance, and its ``pair_id``."""

    gender: str
    class_names: Sequence[str] = ()
    gender_word: str | None = None
    pair_id: Hashable | None = None


@dataclass(frozen=True)
class ObjectAnalysis:
    """Everything the study reports for one T2I model; ``as_json`` gives the report's shape."""

    contingency: GenderContingency
    by_gender_word: Mapping[str, Mapping[str, int]]
    n_images: ByGender[int]
    paired_permutation: PairedPermutationResult

    def as_json(self, human_check: Mapping[str, HumanCheckClass] | None = None) -> dict[str, Any]:
        """The ``objects.<t2i_model>`` entry of the report's JSON."""
        c = self.contingency
        return {
            "counts": c.counts_dict(),
            "chi2": c.chi2,
            "dof": c.dof,
            "p_value": c.p_value,
            "cramers_v": c.cramers_v,
            "includes_person": c.includes_person,
            "residuals": c.residuals_dict(),
            "by_gender_word": {word: dict(row) for word, row in self.by_gender_word.items()},
            "paired_permutation_p": self.paired_permutation.p_value,
            "n_images": self.n_images.as_dict(),
            "human_check": (
                None if human_check is None else {name: hc.as_dict() for name, hc in human_check.items()}
            ),
            "chi2_reason": c.reason,
            "yates_correction": c.yates_correction,
            "paired_permutation": self.paired_permutation.as_dict(),
        }


def analyse_objects(
    images: Iterable[ImageObjects],
    *,
    include_person: bool = True,
    yates_correction: bool = False,
    n_permutations: int | None = DEFAULT_N_PERMUTATIONS,
    seed: int | np.random.Generator = 0,
) -> ObjectAnalysis:
    """The object co-occurrence analysis of one T2I model's images: the χ² table and the paired test."""
    images = list(images)
    normalised: list[tuple[ImageObjects, list[str]]] = []
    for index, image in enumerate(images):
        if image.gender not in GENDERS:
            raise ValueError(f"images[{index}].gender must be 'male' or 'female', got {image.gender!r}")
        if isinstance(image.class_names, str):
            raise ValueError(f"images[{index}].class_names must be a sequence of names, not one string")
        normalised.append((image, [normalise_class_name(n) for n in image.class_names]))

    counts: dict[str, list[int]] = {}
    for image, names in normalised:
        row = GENDERS.index(image.gender)
        for name in names:
            counts.setdefault(name, [0, 0])[row] += 1
    contingency = chi_square_by_gender(
        {name: (m, f) for name, (m, f) in counts.items()},
        include_person=include_person,
        yates_correction=yates_correction,
    )
    columns = contingency.classes
    column_set = set(columns)

    by_word: dict[str, Counter[str]] = {}
    for image, names in normalised:
        if image.gender_word is not None:
            by_word.setdefault(image.gender_word, Counter()).update(n for n in names if n in column_set)
    by_gender_word = {word: {c: by_word[word][c] for c in columns} for word in sorted(by_word)}

    n_images = ByGender(
        sum(1 for image in images if image.gender == "male"),
        sum(1 for image in images if image.gender == "female"),
    )
    male, female, incomplete = pair_count_matrices(
        [(image.gender, names, image.pair_id) for image, names in normalised], columns
    )
    if n_permutations is None:
        permutation = PairedPermutationResult(None, None, 0, male.shape[0], 0, None, False, "not run")
    elif male.shape[0] == 0:
        reason = "no image has a pair id" if incomplete == 0 else "no pair has images of both genders"
        permutation = PairedPermutationResult(None, None, 0, 0, 0, None, False, reason)
    else:
        permutation = paired_permutation_test(male, female, n_permutations=n_permutations, seed=seed)
    permutation = replace(permutation, n_incomplete_pairs=incomplete)
    return ObjectAnalysis(contingency, by_gender_word, n_images, permutation)


def pair_count_matrices(
    images: Iterable[tuple[str, Sequence[str], Hashable | None]],
    classes: Sequence[str],
) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-pair class counts of the male and the female side, and how many pair ids were one-gender."""
    position = {normalise_class_name(name): j for j, name in enumerate(classes)}
    sides: dict[Hashable, list[np.ndarray | None]] = {}
    for gender, names, pair_id in images:
        if pair_id is None:
            continue
        if gender not in GENDERS:
            raise ValueError(f"gender must be 'male' or 'female', got {gender!r}")
        pair = sides.setdefault(pair_id, [None, None])
        row = GENDERS.index(gender)
        vector = pair[row]
        if vector is None:
            vector = pair[row] = np.zeros(len(classes), dtype=np.int64)
        for name in names:
            j = position.get(normalise_class_name(name))
            if j is not None:
                vector[j] += 1
    complete = [pair for pair in sides.values() if pair[0] is not None and pair[1] is not None]
    shape = (len(complete), len(classes))
    male = np.array([pair[0] for pair in complete], dtype=np.int64).reshape(shape)
    female = np.array([pair[1] for pair in complete], dtype=np.int64).reshape(shape)
    return male, female, len(sides) - len(complete)


# --- people checking the detector ---------------------------------------------------------------
@dataclass(frozen=True)
class HumanCheckClass:
    """People's verdict on one class's boxes: precision and missed rate."""

    precision: float | None
    n_confirmed: int
    n_rejected: int
    n_missed: int
    missed_rate: float | None

    def as_dict(self) -> dict[str, Any]:
        """Plain-data form for the JSON report."""
        return asdict(self)


def human_check(
    *,
    confirmed: Iterable[str] = (),
    rejected: Iterable[str] = (),
    missed: Iterable[str] = (),
) -> dict[str, HumanCheckClass]:
    """Per class (COCO order), the detector's precision and missed-object rate as people judged its boxes."""
    tallies = [Counter(normalise_class_name(n) for n in group) for group in (confirmed, rejected, missed)]
    names = sorted(set().union(*tallies), key=coco_class_index)
    out: dict[str, HumanCheckClass] = {}
    for name in names:
        c, r, m = (tally[name] for tally in tallies)
        out[name] = HumanCheckClass(
            n_confirmed=c,
            n_rejected=r,
            n_missed=m,
            precision=c / (c + r) if c + r else None,
            missed_rate=m / (c + m) if c + m else None,
        )
    return out


@dataclass(frozen=True)
class JudgedImage:
    """An image whose detections people checked: class names of confirmed, rejected and missed objects."""

    gender: str
    confirmed: Sequence[str] = ()
    rejected: Sequence[str] = ()
    missed: Sequence[str] = ()
    gender_word: str | None = None
    pair_id: Hashable | None = None


def human_check_of_images(images: Iterable[JudgedImage]) -> dict[str, HumanCheckClass]:
    """``human_check`` over the boxes and missed objects of all ``images``."""
    images = list(images)
    return human_check(
        confirmed=[n for image in images for n in image.confirmed],
        rejected=[n for image in images for n in image.rejected],
        missed=[n for image in images for n in image.missed],
    )


def confirmed_images(images: Iterable[JudgedImage], *, include_missed: bool = False) -> list[ImageObjects]:
    """The checked images with only their confirmed boxes (and the missed objects if asked)."""
    return [
        ImageObjects(
            gender=image.gender,
            class_names=[*image.confirmed, *(image.missed if include_missed else ())],
            gender_word=image.gender_word,
            pair_id=image.pair_id,
        )
        for image in images
    ]


def analyse_confirmed_objects(
    images: Iterable[JudgedImage], *, include_missed: bool = False, **options: Any
) -> ObjectAnalysis:
    """``analyse_objects`` (its ``options``) on the checked images counting confirmed boxes (and
    missed objects if asked)."""
    return analyse_objects(confirmed_images(images, include_missed=include_missed), **options)
