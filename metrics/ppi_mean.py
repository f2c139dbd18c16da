# ruff: noqa: RUF002  (the maths keeps its own Greek letters)
"""Few-label estimates of mean-type estimands (shares, counts, differences, GEP score, max gap,
Cramér's V) with power tuning, for every protocol; docs/explanation/estimator.md."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

#: Per item, numbers or flags: a sequence or an array.
Floats = Sequence[float] | np.ndarray
Flags = Sequence[bool] | np.ndarray

FOLDS = 5
#: The largest detector weight: 1 trusts the detector fully; above 1 rescales a detector whose
#: scores move less than the truth (a score of 0.9 for yes and 0.1 for no).
LAMBDA_MAX = 1.0


class MeanInputError(ValueError):
    """Bad input to the estimator; the message names the field and the item."""


@dataclass(frozen=True)
class Estimand:
    """One estimated number in the few-label estimate's shape. Undefined figures are None."""

    estimate: float | None
    ci95: tuple[float, float] | None
    human_only_estimate: float | None
    human_only_ci95: tuple[float, float] | None
    detector_only: float | None
    lam: float | None
    effective_labels: float | None
    n_items: int = 0
    n_labelled: int = 0

    def width(self) -> float | None:
        return None if self.ci95 is None else self.ci95[1] - self.ci95[0]

    def as_json(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "ci95": None if self.ci95 is None else list(self.ci95),
            "human_only": {
                "estimate": self.human_only_estimate,
                "ci95": None if self.human_only_ci95 is None else list(self.human_only_ci95),
            },
            "detector_only": self.detector_only,
            "lambda": self.lam,
            "effective_labels": self.effective_labels,
        }


UNDEFINED = Estimand(None, None, None, None, None, None, None)


@dataclass(frozen=True)
class Linear:
    """A linear estimand's fit: estimate, per-item variance contributions c_i (V̂ = Σ c_i²), λ, labels."""

    estimate: float
    c: np.ndarray
    lam: float
    n_labelled: int
    #: The degrees of freedom to use instead of this fit's own (``_floored``: the labels-only fit's).
    df_of: float | None = None
    #: Labels only: the contributions before ``_binary_floor`` (what the pooled df are read from).
    c_raw: np.ndarray | None = None

    @property
    def c_df(self) -> np.ndarray:
        return self.c if self.c_raw is None else self.c_raw

    @property
    def variance(self) -> float:
        return float(np.sum(self.c**2))

    @property
    def df(self) -> float:
        return self.df_of if self.df_of is not None else _satterthwaite(self.c**2)


@dataclass(frozen=True)
class Entry:
    """One entry of a vector estimand: detector values, human values and coefficients."""

    f: np.ndarray | None
    y: np.ndarray
    coef: np.ndarray
    #: This entry's own sampled indicators (an explicit GEP item answers one attribute only);
    #: None: the ``xi`` given to ``estimate_mean_abs``.
    xi: np.ndarray | None = None


def _satterthwaite(v: np.ndarray) -> float:
    total = float(np.sum(v))
    squares = float(np.sum(v**2))
    if total <= 0 or squares <= 0:
        return 1.0
    return max(1.0, total * total / squares - 1.0)


def _checked(
    y: Floats, f: Floats | None, pi: Floats, xi: Flags
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    y_ = np.asarray(y, dtype=float)
    n = y_.shape[0]
    f_ = np.zeros(n) if f is None else np.asarray(f, dtype=float)
    pi_ = np.asarray(pi, dtype=float)
    xi_ = np.asarray(xi, dtype=bool)
    for name, arr in (("f", f_), ("pi", pi_), ("xi", xi_)):
        if arr.shape != (n,):
            raise MeanInputError(f"{name}: {arr.shape[0] if arr.ndim else 0} values for {n} items.")
    bad = np.flatnonzero(~np.isfinite(f_))
    if bad.size:
        raise MeanInputError(f"f: item {int(bad[0])} has no finite detector value.")
    bad = np.flatnonzero(xi_ & ~((pi_ > 0) & (pi_ <= 1)))
    if bad.size:
        raise MeanInputError(
            f"pi: item {int(bad[0])} is labelled with inclusion probability {pi_[bad[0]]} (need 0 < π ≤ 1)."
        )
    bad = np.flatnonzero(xi_ & ~np.isfinite(y_))
    if bad.size:
        raise MeanInputError(f"y: item {int(bad[0])} is sampled (xi) but has no human value.")
    return y_, f_, pi_, xi_


def _fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n) % max(1, folds)


def _fit(
    y: np.ndarray, f: np.ndarray, groups: np.ndarray, w: np.ndarray, n_groups: int, use_detector: bool
) -> tuple[np.ndarray, float]:
    """(α per group, λ) minimising Σ w (y - α_g - λ f)² over the rows given, λ in [0, 1]."""
    alpha = np.zeros(n_groups)
    if w.size == 0 or float(w.sum()) <= 0:
        return alpha, 0.0
    sw = np.bincount(groups, weights=w, minlength=n_groups)
    ok = sw > 0
    lam = 0.0
    if use_detector:
        ybar = np.where(ok, np.bincount(groups, weights=w * y, minlength=n_groups) / np.where(ok, sw, 1), 0.0)
        fbar = np.where(ok, np.bincount(groups, weights=w * f, minlength=n_groups) / np.where(ok, sw, 1), 0.0)
        fc = f - fbar[groups]
        sxx = float(np.sum(w * fc * fc))
        if sxx > 1e-12:
            lam = float(np.clip(np.sum(w * fc * (y - ybar[groups])) / sxx, 0.0, LAMBDA_MAX))
    resid = y - lam * f
    alpha = np.where(
        ok, np.bincount(groups, weights=w * resid, minlength=n_groups) / np.where(ok, sw, 1), 0.0
    )
    return alpha, lam


def _linear(entry: Entry, xi: np.ndarray, pi: np.ndarray, folds: int, seed: int, *, detector: bool) -> Linear:
    """θ̂ = Σ a_i [g_i + ξ_i (Y_i - g_i)/π_i] with g cross-fitted (``y`` NaN where not labelled);
    ``detector=False`` (or no ``f``): labels only."""
    f = entry.f if detector else None
    use_detector = f is not None
    y_, f_, pi_, xi_ = _checked(entry.y, f, pi, xi)
    a = np.asarray(entry.coef, dtype=float)
    if a.shape != y_.shape:
        raise MeanInputError(f"coef: {a.shape[0]} values for {y_.shape[0]} items.")
    # One intercept per sign of the coefficient.
    g_ids = np.sign(a).astype(int) + 1
    n_groups = int(g_ids.max()) + 1 if g_ids.size else 1
    active = a != 0
    labelled = xi_ & active
    safe_pi = np.where(labelled, pi_, 1.0)
    w = np.where(labelled, (1.0 - safe_pi) / safe_pi**2 * a * a, 0.0)
    # Items labelled with certainty carry zero weight; with nothing else labelled, fit on them unweighted.
    fit_w = w if float(w.sum()) > 0 else labelled.astype(float)
    fold = _fold_ids(y_.shape[0], folds, seed)
    g = np.zeros_like(y_)
    lams = []
    yl = np.where(labelled, y_, 0.0)
    for k in range(max(1, folds)):
        train = labelled & (fold != k) if folds > 1 else labelled
        idx = np.flatnonzero(train)
        alpha, lam = _fit(yl[idx], f_[idx], g_ids[idx], fit_w[idx], n_groups, use_detector)
        here = fold == k if folds > 1 else np.ones_like(labelled)
        g[here] = alpha[g_ids[here]] + lam * f_[here]
        lams.append(lam)
    r = np.where(labelled, yl - g, 0.0)
    theta = float(np.sum(a * (g + np.where(labelled, r / safe_pi, 0.0))))
    c = np.where(labelled, a * r * np.sqrt((1.0 - safe_pi) / safe_pi**2), 0.0)
    if use_detector:
        return Linear(theta, c, float(np.mean(lams)), int(labelled.sum()))
    # Labels only: df from the observed residuals, the variance floored (``_binary_floor``).
    floored = _binary_floor(c, yl, labelled, a, safe_pi, g_ids, n_groups)
    return Linear(theta, floored, 0.0, int(labelled.sum()), df_of=_satterthwaite(c**2), c_raw=c)


def _binary_floor(
    c: np.ndarray,
    y: np.ndarray,
    labelled: np.ndarray,
    a: np.ndarray,
    pi: np.ndarray,
    groups: np.ndarray,
    n_groups: int,
) -> np.ndarray:
    """Labels-only contributions, each group's variance floored at Agresti-Coull's for values in [0, 1]."""
    if not labelled.any() or np.any((y[labelled] < 0) | (y[labelled] > 1)):
        return c
    out = c.copy()
    unit = np.where(labelled, a * np.sqrt((1.0 - pi) / pi**2), 0.0)
    for k in range(n_groups):
        here = labelled & (groups == k)
        n = int(here.sum())
        if n == 0:
            continue
        p = (float(y[here].sum()) + 2.0) / (n + 4.0)
        floor = unit[here] ** 2 * p * (1.0 - p)
        if float(floor.sum()) > float(np.sum(c[here] ** 2)):
            out[here] = unit[here] * np.sqrt(p * (1.0 - p))
    return out


def _floored(tuned: Linear, human: Linear) -> Linear:
    """The tuned fit with one pseudo-label's worth of the labels-only variance mixed in."""
    n = tuned.n_labelled
    if n == 0:
        return tuned
    c = np.concatenate([tuned.c * np.sqrt(n / (n + 1.0)), human.c * np.sqrt(1.0 / (n + 1.0))])
    # The labels-only df for the tuned fit too: its own collapse to ~1 when one detector error dominates.
    return Linear(tuned.estimate, c, tuned.lam, n, df_of=human.df)


def _reachable(pi: np.ndarray, xi: np.ndarray, a: np.ndarray) -> bool:
    """Whether the design can estimate Σ a_i Y_i (every π > 0, two labelled items drawn with π < 1)."""
    active = a != 0
    if np.any(active & ~(pi > 0)):
        return False
    uncertain = active & (pi < 1)
    return not uncertain.any() or int(np.sum(uncertain & xi)) >= 2


def _detector_only(f: Floats | None, a: np.ndarray) -> Estimand:
    value = None if f is None else float(np.sum(a * np.asarray(f, dtype=float)))
    return Estimand(None, None, None, None, value, None, None, n_items=int(np.sum(a != 0)))


def _t_interval(fit: Linear, lo: float | None, hi: float | None) -> tuple[float, float]:
    half = float(stats.t.ppf(0.975, fit.df)) * np.sqrt(fit.variance)
    left, right = fit.estimate - half, fit.estimate + half
    if lo is not None:
        left, right = max(left, lo), max(right, lo)
    if hi is not None:
        left, right = min(left, hi), min(right, hi)
    return (float(left), float(right))


def _effective(n: int, human: float, tuned: float) -> float:
    if tuned <= 0:
        return float(n) if human <= 0 else float("inf")
    return float(n * human / tuned)


def _fits(entry: Entry, xi: np.ndarray, pi: np.ndarray, folds: int, seed: int) -> tuple[Linear, Linear]:
    """The tuned fit (floored; the labels-only one without ``f``) and the labels-only fit."""
    human = _linear(entry, xi, pi, folds, seed, detector=False)
    if entry.f is None:
        return human, human
    return _floored(_linear(entry, xi, pi, folds, seed, detector=True), human), human


def _estimand(
    tuned: Linear, human: Linear, detector: float | None, lo: float | None, hi: float | None, n_items: int
) -> Estimand:
    """One entry's estimand from its tuned and labels-only fits, intervals clipped to [lo, hi]."""
    return _pooled(
        [tuned], [human], lambda fits: (fits[0].estimate, _t_interval(fits[0], lo, hi)), detector, n_items
    )


def estimate_linear(
    f: Floats | None,
    y: Floats,
    xi: Flags,
    pi: Floats,
    coef: Floats,
    *,
    bounds: tuple[float | None, float | None] = (None, None),
    folds: int = FOLDS,
    seed: int = 0,
) -> Estimand:
    """A linear estimand (mean, difference, total); ``f=None``: labels only."""
    a = np.asarray(coef, dtype=float)
    if np.any(a != 0):
        _checked(y, f, pi, xi)
    entry = Entry(None if f is None else np.asarray(f, dtype=float), np.asarray(y, dtype=float), a)
    pi_, xi_ = np.asarray(pi, dtype=float), np.asarray(xi, dtype=bool)
    return _entry_fits([entry], pi_, xi_, bounds, folds, seed)[0][0]


def mean_coefficients(mask: np.ndarray) -> np.ndarray:
    """a_i = 1/N over the items in ``mask`` (a mean), 0 elsewhere."""
    m = np.asarray(mask, dtype=bool)
    n = int(m.sum())
    return np.where(m, 1.0 / n, 0.0) if n else np.zeros(m.shape)


def difference_coefficients(mask_a: np.ndarray, mask_b: np.ndarray) -> np.ndarray:
    """a_i for mean over A minus mean over B (disjoint masks); all 0 when either is empty."""
    a, b = mean_coefficients(mask_a), mean_coefficients(mask_b)
    if not a.any() or not b.any():
        return np.zeros(a.shape)
    return a - b


def _entry_fits(
    entries: Sequence[Entry],
    pi: np.ndarray,
    xi: np.ndarray,
    bounds: tuple[float | None, float | None],
    folds: int,
    seed: int,
) -> tuple[list[Estimand], list[Linear], list[Linear], list[float]]:
    """Each entry's estimand, and the tuned and labels-only fits and detector values of the defined ones."""
    singles: list[Estimand] = []
    tuned_fits: list[Linear] = []
    human_fits: list[Linear] = []
    detector: list[float] = []
    for entry in entries:
        if not np.any(entry.coef != 0):
            singles.append(UNDEFINED)
            continue
        x = xi if entry.xi is None else np.asarray(entry.xi, dtype=bool)
        if not _reachable(pi, x, entry.coef):
            singles.append(_detector_only(entry.f, entry.coef))
            continue
        tuned, human = _fits(entry, x, pi, folds, seed)
        human_fits.append(human)
        tuned_fits.append(tuned)
        if entry.f is not None:
            detector.append(float(np.sum(entry.coef * entry.f)))
        value = None if entry.f is None else detector[-1]
        singles.append(_estimand(tuned, human, value, *bounds, int(np.sum(entry.coef != 0))))
    return singles, tuned_fits, human_fits, detector


def _pooled(
    tuned: list[Linear],
    human: list[Linear],
    interval: Callable[[list[Linear]], tuple[Any, Any]],
    detector: float | None,
    n_items: int,
) -> Estimand:
    """The estimand of a functional of several fits: ``interval(fits)`` gives its value and interval."""
    (s_t, ci_t), (s_h, ci_h) = interval(tuned), interval(human)
    n_lab = max(fit.n_labelled for fit in tuned)
    return Estimand(
        estimate=s_t,
        ci95=ci_t,
        human_only_estimate=s_h,
        human_only_ci95=ci_h,
        detector_only=detector,
        lam=float(np.mean([fit.lam for fit in tuned])),
        effective_labels=_effective(
            n_lab, sum(fit.variance for fit in human), sum(fit.variance for fit in tuned)
        ),
        n_items=n_items,
        n_labelled=n_lab,
    )


def _pooled_df(human: list[Linear]) -> float:
    """One Satterthwaite df for the pooled labels-only terms (entries share items; see ``_floored``)."""
    return _satterthwaite(np.concatenate([fit.c_df**2 for fit in human]))


def _t_errors(c: np.ndarray, df: float, draws: int, seed: int) -> np.ndarray:
    """``draws`` errors e = C z / sqrt(χ²/df), multivariate t with covariance C Cᵀ (C: K x N)."""
    rng = np.random.default_rng(seed)
    return (c @ rng.standard_normal((c.shape[1], draws))) / np.sqrt(rng.chisquare(df, draws) / df)


def _error_quantile(cs: list[np.ndarray], df: float, draws: int, seed: int, bound: Any) -> float:
    """95 % quantile of ``bound(e)``, e ~ multivariate t(Σ = C Cᵀ, df)."""
    if not cs:
        return 0.0
    c = np.vstack(cs)
    if not np.any(c):
        return 0.0
    return float(np.quantile(bound(_t_errors(c, df, draws, seed)), 0.95))


def _bounded_functional(
    entries: Sequence[Entry],
    xi: Flags,
    pi: Floats,
    *,
    value: Any,
    bound: Any,
    entry_bounds: tuple[float, float],
    folds: int = FOLDS,
    seed: int = 0,
    draws: int = 4000,
) -> tuple[Estimand, list[Estimand]]:
    """A Lipschitz-bounded functional ``value`` of the entries, with the interval value(d̂) ± q."""
    pi_ = np.asarray(pi, dtype=float)
    xi_ = np.asarray(xi, dtype=bool)
    singles, tuned_fits, human_fits, detector = _entry_fits(entries, pi_, xi_, entry_bounds, folds, seed)
    n_defined = sum(1 for e in entries if np.any(e.coef != 0))
    if len(tuned_fits) < n_defined or not tuned_fits:
        # An entry the design cannot estimate leaves the functional undefined, not one of fewer.
        defined = [s.detector_only for s in singles if s.detector_only is not None]
        detector_value = (
            float(value(np.array(defined))) if defined and len(defined) == n_defined and n_defined else None
        )
        return Estimand(None, None, None, None, detector_value, None, None), singles

    df = _pooled_df(human_fits)

    def interval(fits: list[Linear]) -> tuple[float, tuple[float, float]]:
        s = float(value(np.array([fit.estimate for fit in fits])))
        q = _error_quantile([fit.c for fit in fits], df, draws, seed, bound)
        return s, (max(0.0, s - q), min(1.0, s + q))

    detector_value = float(value(np.array(detector))) if len(detector) == len(tuned_fits) else None
    n_items = int(np.sum(np.any(np.vstack([e.coef for e in entries]) != 0, axis=0)))
    return _pooled(tuned_fits, human_fits, interval, detector_value, n_items), singles


def estimate_mean_abs(
    entries: Sequence[Entry], xi: Flags, pi: Floats, **options: Any
) -> tuple[Estimand, list[Estimand]]:
    """The GEP score S = mean_k |d_k| over the defined entries, and each entry (options: folds, seed, draws)."""
    return _bounded_functional(
        entries,
        xi,
        pi,
        value=lambda d: np.mean(np.abs(d)),
        bound=lambda e: np.mean(np.abs(e), axis=0),
        entry_bounds=(-1.0, 1.0),
        **options,
    )


def estimate_max_gap(
    entries: Sequence[Entry], xi: Flags, pi: Floats, **options: Any
) -> tuple[Estimand, list[Estimand]]:
    """The largest gap between groups' shares and each group's share (options as ``estimate_mean_abs``)."""
    return _bounded_functional(
        entries,
        xi,
        pi,
        value=lambda s: np.max(s) - np.min(s),
        bound=lambda e: np.max(e, axis=0) - np.min(e, axis=0),
        entry_bounds=(0.0, 1.0),
        **options,
    )


def cramers_v(table: np.ndarray) -> float | None:
    """Cramér's V of a contingency table; None with fewer than two non-empty rows or columns."""
    t = np.asarray(table, dtype=float)
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    if t.shape[0] < 2 or t.shape[1] < 2:
        return None
    n = t.sum()
    expected = np.outer(t.sum(axis=1), t.sum(axis=0)) / n
    chi2 = float(np.sum((t - expected) ** 2 / expected))
    return float(np.sqrt(chi2 / (n * (min(t.shape) - 1))))


def estimate_table(
    cells: np.ndarray,
    f: np.ndarray,
    y: np.ndarray,
    xi: Flags,
    pi: Floats,
    *,
    folds: int = FOLDS,
    seed: int = 0,
    draws: int = 2000,
) -> tuple[Estimand, np.ndarray, list[list[Estimand]]]:
    """Cramér's V of the table of totals per (row, column) (``cells``: each item's row), the
    estimated table and every cell's own estimand (undefined cells: NaN, the detector's value)."""
    rows = np.asarray(cells, dtype=int)
    y_, f_ = np.asarray(y, dtype=float), np.asarray(f, dtype=float)
    pi_, xi_ = np.asarray(pi, dtype=float), np.asarray(xi, dtype=bool)
    n_rows, n_cols = int(rows.max()) + 1, y_.shape[1]
    f_table = np.array([[np.sum((rows == g) * f_[:, c]) for c in range(n_cols)] for g in range(n_rows)])
    if not _reachable(pi_, xi_, np.ones(rows.shape)):
        # No usable round: only the detector's table is known.
        only = [
            [_detector_only(f_[:, c], (rows == g).astype(float)) for c in range(n_cols)]
            for g in range(n_rows)
        ]
        v = Estimand(None, None, None, None, cramers_v(f_table), None, None, n_items=int(rows.size))
        return v, np.full((n_rows, n_cols), np.nan), only
    tuned: list[Linear] = []
    human: list[Linear] = []
    for g in range(n_rows):
        coef = (rows == g).astype(float)
        for c in range(n_cols):
            t, h = _fits(Entry(f_[:, c], y_[:, c], coef), xi_, pi_, folds, seed)
            human.append(h)
            tuned.append(t)

    df = _pooled_df(human)

    def interval(fits: list[Linear]) -> tuple[float | None, tuple[float, float] | None]:
        table = np.clip(np.array([fit.estimate for fit in fits]).reshape(n_rows, n_cols), 0, None)
        v = cramers_v(table)
        if v is None:
            return None, None
        width = max(len(fit.c) for fit in fits)
        c = np.vstack([np.pad(fit.c, (0, width - len(fit.c))) for fit in fits])
        if not np.any(c):
            return v, (v, v)
        e = _t_errors(c, df, draws, seed)
        star = np.array(
            [
                cramers_v(np.clip(table + e[:, b].reshape(n_rows, n_cols), 0, None)) or 0.0
                for b in range(draws)
            ]
        )
        lo, hi = np.quantile(star, [0.025, 0.975])
        low = max(0.0, min(lo, 2 * v - hi))
        high = min(1.0, max(hi, 2 * v - lo))
        return v, (float(low), float(high))

    total = _pooled(tuned, human, interval, cramers_v(f_table), int(rows.size))
    singles = [
        [
            _estimand(
                tuned[g * n_cols + c],
                human[g * n_cols + c],
                float(np.sum((rows == g) * f_[:, c])),
                0.0,
                None,
                int(np.sum(rows == g)),
            )
            for c in range(n_cols)
        ]
        for g in range(n_rows)
    ]
    return total, np.array([fit.estimate for fit in tuned]).reshape(n_rows, n_cols), singles
