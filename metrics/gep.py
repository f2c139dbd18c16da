"""GEP: gender presentation differences (Zhang et al. 2023), as pure functions over plain data.

GEP vectors and scores per T2I model and setting (neutral, explicit) from yes/no answers or a
detector's per-image scores, and the detectors' validation (Kendall's tau-b, MCC, Pearson's r,
ROC-AUC); the formulas: docs/explanation/metrics.md. numpy/scipy only. Undefined figures are
``None``, never 0; bad input raises :class:`GepInputError`, a ``ValueError`` naming the item.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real
from typing import Any, TypeVar, cast

import numpy as np

K = TypeVar("K", bound=Hashable)

# --------------------------------------------------------------------------------------------
# The paper's design: genders, settings, attributes (Table 1), contexts (Table 2)
# --------------------------------------------------------------------------------------------

WOMAN = "woman"
MAN = "man"
#: Metadata values of ``gender``; the GEP vector is woman minus man, so woman comes first.
GENDERS: tuple[str, str] = (WOMAN, MAN)
#: The gender indicators G of section 3, as they open a prompt.
GENDER_INDICATORS: dict[str, str] = {WOMAN: "A woman", MAN: "A man"}

NEUTRAL = "neutral"
EXPLICIT = "explicit"
SETTINGS: tuple[str, str] = (NEUTRAL, EXPLICIT)

#: Question keys of the 15 attributes, in the order of the paper's Table 1 and its appendix tables.
ATTRIBUTE_KEYS: tuple[str, ...] = (
    "boots",
    "slippers",
    "jeans",
    "shorts",
    "slacks",
    "dress",
    "skirt",
    "suit",
    "shirt",
    "uniform",
    "jacket",
    "hat",
    "tie",
    "mask",
    "gloves",
)

#: Key -> attribute phrase as it stands in prompts and questions (Table 1, with its preposition;
#: the authors' released prompts confirm e.g. "in uniform" without article and "with gloves").
ATTRIBUTE_PHRASES: dict[str, str] = {
    "boots": "in boots",
    "slippers": "in slippers",
    "jeans": "in jeans",
    "shorts": "in shorts",
    "slacks": "in slacks",
    "dress": "in a dress",
    "skirt": "in a skirt",
    "suit": "in a suit",
    "shirt": "in a shirt",
    "uniform": "in uniform",
    "jacket": "in a jacket",
    "hat": "in a hat",
    "tie": "with a tie",
    "mask": "with a mask",
    "gloves": "with gloves",
}

#: Key -> the text a CLIP estimator embeds: the phrase without its preposition (section 4.1,
#: "a dress", "a suit"), which is also the authors' released query list.
ATTRIBUTE_CLIP_TEXTS: dict[str, str] = {
    key: phrase.split(" ", 1)[1] for key, phrase in ATTRIBUTE_PHRASES.items()
}

#: Key -> the annotation question of section 5 ("Do you see a person [a]?").
ATTRIBUTE_QUESTIONS: dict[str, str] = {
    key: f"Do you see a person {phrase}?" for key, phrase in ATTRIBUTE_PHRASES.items()
}

#: The reference string r(a) of the calibrated CLIP estimator (equation 5): an irrelevant text.
CALIBRATION_REFERENCE = "an object"

#: The 16 contexts C of Table 2, in the paper's (and the released prompts') order.
CONTEXTS: tuple[str, ...] = (
    "sitting at a table",
    "sitting on a bed",
    "standing on a skateboard",
    "standing next to a rack",
    "riding a bike",
    "riding a horse",
    "laying on the snow",
    "laying on a couch",
    "walking through a forest",
    "walking down a sidewalk",
    "holding up a smartphone",
    "holding an umbrella",
    "jumping into the air",
    "jumping over a box",
    "running across the park",
    "running on the beach",
)

#: The gender terms G-hat of the cross-modal classifiers' training texts (section 4.2).
CLS_GENDER_INDICATORS: tuple[str, ...] = ("A man", "A woman", "A person")

YES = "yes"
NO = "no"


class GepInputError(ValueError):
    """Input the GEP statistics cannot use; the message names the item (and question) at fault."""


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------

#: Columns of the shipped prompt set ``generation/prompt_sets/gep2023.csv``.
GEP_PROMPT_COLUMNS: tuple[str, ...] = (
    "category",
    "word",
    "prompt",
    "gender",
    "setting",
    "context",
    "attribute",
)


@dataclass(frozen=True)
class GepPrompt:
    """One prompt of the study with the metadata its images carry.

    ``attribute`` is the question key named by an explicit prompt and None for a neutral one.
    ``category`` (= setting) and ``word`` (= context) are the generic prompt-set columns.
    """

    gender: str
    setting: str
    context: str
    attribute: str | None
    prompt: str

    @property
    def category(self) -> str:
        return self.setting

    @property
    def word(self) -> str:
        return self.context

    def as_row(self) -> dict[str, str]:
        """The CSV row, keyed by :data:`GEP_PROMPT_COLUMNS` (empty attribute for neutral prompts)."""
        return {
            "category": self.category,
            "word": self.word,
            "prompt": self.prompt,
            "gender": self.gender,
            "setting": self.setting,
            "context": self.context,
            "attribute": self.attribute or "",
        }


def gep_prompt_text(gender: str, context: str, attribute: str | None = None) -> str:
    """ "A woman sitting at a table." (neutral) or "A woman in boots sitting at a table." (explicit).

    ``gender`` is ``woman`` or ``man``; ``attribute`` a key of :data:`ATTRIBUTE_PHRASES`.
    Raises ``ValueError`` for anything else.
    """
    if gender not in GENDER_INDICATORS:
        raise ValueError(f"gender {gender!r} is not one of {', '.join(GENDERS)}")
    if attribute is None:
        return f"{GENDER_INDICATORS[gender]} {context}."
    if attribute not in ATTRIBUTE_PHRASES:
        raise ValueError(f"attribute {attribute!r} is not one of {', '.join(ATTRIBUTE_KEYS)}")
    return f"{GENDER_INDICATORS[gender]} {ATTRIBUTE_PHRASES[attribute]} {context}."


def gep_prompts(
    keys: Sequence[str] = ATTRIBUTE_KEYS, contexts: Sequence[str] = CONTEXTS
) -> tuple[GepPrompt, ...]:
    """The study's prompts: 2 x 16 neutral, then 2 x 15 x 16 explicit (512 with the defaults).

    Order: neutral by context, then explicit by attribute and context; woman before man in each
    pair, so the two prompts whose images are compared stand next to each other.
    """
    prompts = [
        GepPrompt(gender, NEUTRAL, context, None, gep_prompt_text(gender, context))
        for context in contexts
        for gender in GENDERS
    ]
    prompts += [
        GepPrompt(gender, EXPLICIT, context, key, gep_prompt_text(gender, context, key))
        for key in keys
        for context in contexts
        for gender in GENDERS
    ]
    return tuple(prompts)


@dataclass(frozen=True)
class ClsTrainingTexts:
    """Training texts of one attribute's cross-modal classifier: label 1 and label 0."""

    positives: tuple[str, ...]
    negatives: tuple[str, ...]


def cls_training_texts(
    genders: Sequence[str] = CLS_GENDER_INDICATORS,
    attributes: Mapping[str, str] = ATTRIBUTE_PHRASES,
    contexts: Sequence[str] = CONTEXTS,
    *,
    ending: str = ".",
) -> dict[str, ClsTrainingTexts]:
    """Per attribute key, the texts "[g] [attribute] [c]" (positive) and "[g] [c]" (negative).

    Section 4.2: g runs over ``genders`` ("A man", "A woman", "A person"), c over ``contexts`` (the
    same contexts as image generation), so with the defaults each key gets 48 positives and 48
    negatives (the paper's 96 training examples). The negatives are the same for every key: they
    differ from the positives only by the attribute, which is what lets the classifier isolate it.
    ``ending`` closes each text like the generation prompts ("."); pass "" for bare texts.
    Raises ``ValueError`` when genders, attributes or contexts is empty (nothing to train on).
    """
    if not genders or not attributes or not contexts:
        raise ValueError("cls_training_texts needs at least one gender, one attribute and one context")
    negatives = tuple(f"{g} {c}{ending}" for g in genders for c in contexts)
    return {
        key: ClsTrainingTexts(
            positives=tuple(f"{g} {phrase} {c}{ending}" for g in genders for c in contexts),
            negatives=negatives,
        )
        for key, phrase in attributes.items()
    }


# --------------------------------------------------------------------------------------------
# Items: one generated image with its metadata, human final answers and detector scores
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GepItem:
    """One image of a GEP study.

    ``gender`` (woman|man), ``setting`` (neutral|explicit) and ``attribute`` (the question key an
    explicit prompt names; None or "" for neutral) come from the prompt's metadata. ``answers``
    maps question key -> final human answer "yes" / "no", or None where the item has no final
    answer yet. ``scores`` maps detector name -> question key -> per-image score (None: not
    scored). Keys outside the attribute keys in use are ignored, so a study may ask more.
    """

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
            # Not checked here: every statistic validates its items and names the bad one (a
            # missing value included, hence the casts of what may be None or another JSON type).
            gender=cast(str, metadata.get("gender")),
            setting=cast(str, metadata.get("setting")),
            attribute=metadata.get("attribute") or None,
            answers=dict(answers or {}),
            scores={name: dict(by_key) for name, by_key in (scores or {}).items()},
        )


def _checked_items(items: Iterable[GepItem], keys: Sequence[str]) -> list[GepItem]:
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
        checked.append(item if item.attribute == attribute else _with_attribute(item, attribute))
    return checked


def _with_attribute(item: GepItem, attribute: str | None) -> GepItem:
    # Normalise "" (how a CSV or a JSON field spells "no attribute") to None once, here.
    return GepItem(item.item_id, item.gender, item.setting, attribute, item.answers, item.scores)


def _relevant(item: GepItem, key: str) -> bool:
    """Whether the item's image counts for attribute ``key``: neutral always, explicit if prompted."""
    return item.setting == NEUTRAL or item.attribute == key


def _per_gender_key(keys: Sequence[str], value: float) -> dict[str, dict[str, Any]]:
    """A fresh {gender: {key: value}} table of counters."""
    return {gender: dict.fromkeys(keys, value) for gender in GENDERS}


# --------------------------------------------------------------------------------------------
# GEP vectors and scores
# --------------------------------------------------------------------------------------------


def gep_score(vector: Mapping[Any, float | None] | Sequence[float | None]) -> float | None:
    """The normalised l1 norm ``mean_j |v_j|`` of a GEP vector (equation 2).

    None when the vector is empty or any entry is None: a mean over fewer attributes would be a
    different statistic, not comparable across models.
    """
    values = list(vector.values()) if isinstance(vector, Mapping) else list(vector)
    if not values or any(v is None for v in values):
        return None
    return float(np.mean(np.abs(np.asarray(values, dtype=float))))


@dataclass(frozen=True)
class HumanGep:
    """GEP_human of one model and setting.

    Per gender and key: ``n_yes`` / ``n_answered`` images, ``frequencies`` their ratio (None when
    nothing was answered), ``n_without_final_answer`` the relevant images left out because they
    have no final answer. ``n_items`` counts the setting's images per gender. ``gep_vector[key]``
    is f_woman - f_man (None when either is None); ``gep_score`` see :func:`gep_score`.
    """

    setting: str
    keys: tuple[str, ...]
    n_items: dict[str, int]
    n_answered: dict[str, dict[str, int]]
    n_yes: dict[str, dict[str, int]]
    n_without_final_answer: dict[str, dict[str, int]]
    frequencies: dict[str, dict[str, float | None]]
    gep_vector: dict[str, float | None]
    gep_score: float | None


def human_gep(items: Iterable[GepItem], *, setting: str, keys: Sequence[str] = ATTRIBUTE_KEYS) -> HumanGep:
    """GEP vector and score from the human final answers of one model's items in ``setting``.

    Items of the other setting are skipped (so one model's items can be passed for both); an
    explicit item counts only for the attribute its prompt names (the paper asks only that).
    Raises GepInputError for bad metadata or answers, ValueError for an unknown setting.
    """
    return _human_gep(_checked_items(items, keys), setting, tuple(keys))


def _human_gep(items: list[GepItem], setting: str, keys: tuple[str, ...]) -> HumanGep:
    if setting not in SETTINGS:
        raise ValueError(f"setting {setting!r} is not one of {', '.join(SETTINGS)}")
    n_items = dict.fromkeys(GENDERS, 0)
    n_answered = _per_gender_key(keys, 0)
    n_yes = _per_gender_key(keys, 0)
    n_missing = _per_gender_key(keys, 0)
    for item in items:
        if item.setting != setting:
            continue
        n_items[item.gender] += 1
        for key in keys:
            if not _relevant(item, key):
                continue
            answer = item.answers.get(key)
            if answer is None:
                n_missing[item.gender][key] += 1
                continue
            n_answered[item.gender][key] += 1
            n_yes[item.gender][key] += answer == YES
    frequencies = {
        gender: {key: _ratio(n_yes[gender][key], n_answered[gender][key]) for key in keys}
        for gender in GENDERS
    }
    vector = {
        key: _sum_difference(n_yes[WOMAN][key], n_answered[WOMAN][key], n_yes[MAN][key], n_answered[MAN][key])
        for key in keys
    }
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


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _sum_difference(sum_a: float, n_a: int, sum_b: float, n_b: int) -> float | None:
    """sum_a/n_a - sum_b/n_b, computed exactly and rounded once (None if a denominator is 0).

    Subtracting the two rounded floats would leave noise of ~1e-17 that breaks true ties: 28/80 -
    30/80 and 4/80 - 6/80 would differ, so Kendall's tau-b would rank two equal differences and a
    true 0 could take a sign in the MCC.
    """
    if not n_a or not n_b:
        return None
    return float(Fraction(sum_a) / n_a - Fraction(sum_b) / n_b)


@dataclass(frozen=True)
class AutoGep:
    """A detector's GEP of one model and setting (GEP_C, GEP_CC, GEP_CLS, ...).

    ``mean_scores[gender][key]`` is the mean per-image score over the ``n_scored`` relevant images
    (None when there are none); ``n_without_score`` counts relevant images the detector did not
    score. ``gep_vector[key]`` is mean_woman - mean_man; its scale is the detector's, not a
    frequency's, so only its ranking and signs are comparable with the human vector.
    """

    detector: str
    setting: str
    keys: tuple[str, ...]
    n_scored: dict[str, dict[str, int]]
    n_without_score: dict[str, dict[str, int]]
    mean_scores: dict[str, dict[str, float | None]]
    gep_vector: dict[str, float | None]
    gep_score: float | None


def auto_gep(
    items: Iterable[GepItem], *, detector: str, setting: str, keys: Sequence[str] = ATTRIBUTE_KEYS
) -> AutoGep:
    """GEP vector and score from ``detector``'s per-image scores (equations 4, 5 and 7).

    The same images count as for :func:`human_gep` (explicit: only those prompted with the key),
    but human answers play no part: an unannotated image still counts if it has a score.
    """
    return _auto_gep(_checked_items(items, keys), detector, setting, tuple(keys))


def _auto_gep(items: list[GepItem], detector: str, setting: str, keys: tuple[str, ...]) -> AutoGep:
    if setting not in SETTINGS:
        raise ValueError(f"setting {setting!r} is not one of {', '.join(SETTINGS)}")
    scores: dict[str, dict[str, list[float]]] = {gender: {key: [] for key in keys} for gender in GENDERS}
    n_missing = _per_gender_key(keys, 0)
    for item in items:
        if item.setting != setting:
            continue
        by_key = item.scores.get(detector, {})
        for key in keys:
            if not _relevant(item, key):
                continue
            score = by_key.get(key)
            if score is None:
                n_missing[item.gender][key] += 1
                continue
            scores[item.gender][key].append(float(score))
    n_scored = {gender: {key: len(scores[gender][key]) for key in keys} for gender in GENDERS}
    # fsum and one exact subtraction (as for the human vector): a detector whose scores equal the
    # human 0/1 answers reproduces the human vector bit for bit, ties included.
    sums = {gender: {key: math.fsum(scores[gender][key]) for key in keys} for gender in GENDERS}
    means = {
        gender: {key: _ratio(sums[gender][key], n_scored[gender][key]) for key in keys} for gender in GENDERS
    }
    vector = {
        key: _sum_difference(sums[WOMAN][key], n_scored[WOMAN][key], sums[MAN][key], n_scored[MAN][key])
        for key in keys
    }
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


# --------------------------------------------------------------------------------------------
# Agreement statistics (own implementations: explicit about their undefined cases; the tests
# check them against scipy and scikit-learn wherever those define the figure)
# --------------------------------------------------------------------------------------------


def _paired(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    if xs.shape != ys.shape:
        raise ValueError(f"paired sequences differ in length ({xs.size} and {ys.size})")
    if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys))):
        raise ValueError("paired sequences must hold finite numbers only")
    return xs, ys


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b: (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y)) over all pairs.

    The variant the paper uses (appendix D), which corrects for ties; equals
    ``scipy.stats.kendalltau(x, y, variant="b")``. None with fewer than two values or when either
    sequence is constant (every pair tied: 0/0).
    """
    xs, ys = _paired(x, y)
    n = xs.size
    if n < 2:
        return None
    balance = 0  # concordant minus discordant pairs
    untied_x = 0
    untied_y = 0
    # One row of the pair matrix at a time: O(n^2) time, O(n) memory, exact integer counts.
    for i in range(n - 1):
        sx = np.sign(xs[i + 1 :] - xs[i])
        sy = np.sign(ys[i + 1 :] - ys[i])
        balance += int(np.sum(sx * sy))
        untied_x += int(np.count_nonzero(sx))
        untied_y += int(np.count_nonzero(sy))
    if untied_x == 0 or untied_y == 0:
        return None
    return balance / math.sqrt(untied_x * untied_y)


def pearson_r(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's correlation coefficient; equals ``scipy.stats.pearsonr(x, y).statistic``.

    None with fewer than two values or when either sequence is constant (zero variance).
    """
    xs, ys = _paired(x, y)
    # Test constancy on the values themselves: the float mean of equal values need not equal them.
    if xs.size < 2 or np.all(xs == xs[0]) or np.all(ys == ys[0]):
        return None
    dx = xs - xs.mean()
    dy = ys - ys.mean()
    r = float(np.sum(dx * dy) / math.sqrt(float(np.sum(dx * dx)) * float(np.sum(dy * dy))))
    return max(-1.0, min(1.0, r))


def sign_mcc(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Matthews correlation of the signs of two vectors, a value >= 0 counting as positive.

    The paper binarises both GEP vectors at zero (its footnote 9; the authors' code maps >= 0 to 1,
    < 0 to -1). Equals ``sklearn.metrics.matthews_corrcoef`` of those signs where that is defined;
    None (scikit-learn: 0.0) when there are no values or either vector has one sign only.
    """
    xs, ys = _paired(x, y)
    px = xs >= 0
    py = ys >= 0
    tp = int(np.sum(px & py))
    tn = int(np.sum(~px & ~py))
    fp = int(np.sum(~px & py))
    fn = int(np.sum(px & ~py))
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if denominator == 0:
        return None
    return (tp * tn - fp * fn) / math.sqrt(denominator)


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve of ``scores`` against true/false ``labels``.

    The Mann-Whitney form: the chance that a random positive outscores a random negative, ties
    counting one half; equals ``sklearn.metrics.roc_auc_score``. None when there are no positives
    or no negatives (scikit-learn raises).
    """
    truth = np.asarray(labels, dtype=bool).ravel()
    values = np.asarray(scores, dtype=float).ravel()
    if not np.all(np.isfinite(values)):
        raise ValueError("scores must be finite numbers")
    if truth.shape != values.shape:
        raise ValueError(f"labels and scores differ in length ({truth.size} and {values.size})")
    n_pos = int(truth.sum())
    n_neg = truth.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    from scipy.stats import rankdata  # here, not at the top: scipy.stats costs every command 0.6 s

    ranks = rankdata(values)  # average ranks for ties
    return float((ranks[truth].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def mean_defined(values: Mapping[Any, float | None] | Iterable[float | None]) -> float | None:
    """Mean of the values that are not None; None when none is (e.g. averaging per-attribute AUCs)."""
    pool = values.values() if isinstance(values, Mapping) else values
    defined = [v for v in pool if v is not None]
    return float(np.mean(defined)) if defined else None


@dataclass(frozen=True)
class VectorAgreement:
    """How an automatic GEP vector agrees with the human one (Tables 4 and 19).

    Computed over the ``n`` keys where both vectors are defined.
    """

    kendall_tau_b: float | None
    mcc: float | None
    pearson: float | None
    n: int


def vector_agreement(
    auto_vector: Mapping[str, float | None],
    human_vector: Mapping[str, float | None],
    keys: Sequence[str] = ATTRIBUTE_KEYS,
) -> VectorAgreement:
    """Kendall tau-b, sign MCC and Pearson r between two GEP vectors over their shared defined keys."""
    used = [k for k in keys if auto_vector.get(k) is not None and human_vector.get(k) is not None]
    x = [float(auto_vector[k]) for k in used]  # type: ignore[arg-type]
    y = [float(human_vector[k]) for k in used]  # type: ignore[arg-type]
    return VectorAgreement(
        kendall_tau_b=kendall_tau_b(x, y),
        mcc=sign_mcc(x, y),
        pearson=pearson_r(x, y),
        n=len(used),
    )


@dataclass(frozen=True)
class RocAuc:
    """Per-attribute ROC-AUC of an detector's scores against the human final answers (Table 16).

    ``n_positive`` / ``n_negative`` count the (yes / no) images used per key; ``by_attribute`` is
    None where one class is missing; ``mean`` averages the defined ones (Table 7), ``n_defined``
    says how many.
    """

    detector: str
    setting: str | None
    by_attribute: dict[str, float | None]
    n_positive: dict[str, int]
    n_negative: dict[str, int]
    mean: float | None
    n_defined: int


def attribute_roc_auc(
    items: Iterable[GepItem],
    *,
    detector: str,
    setting: str | None,
    keys: Sequence[str] = ATTRIBUTE_KEYS,
) -> RocAuc:
    """ROC-AUC per attribute over the relevant images that have both a final answer and a score.

    ``setting=None`` pools both settings, as the paper's Tables 7 and 16 do (320 images per model
    and attribute: 160 neutral, 160 explicit); a setting name restricts to that setting.
    """
    return _attribute_roc_auc(_checked_items(items, keys), detector, setting, tuple(keys))


def _attribute_roc_auc(
    items: list[GepItem], detector: str, setting: str | None, keys: tuple[str, ...]
) -> RocAuc:
    if setting is not None and setting not in SETTINGS:
        raise ValueError(f"setting {setting!r} is not one of {', '.join(SETTINGS)} (or None for both)")
    labels: dict[str, list[bool]] = {key: [] for key in keys}
    scores: dict[str, list[float]] = {key: [] for key in keys}
    for item in items:
        if setting is not None and item.setting != setting:
            continue
        by_key = item.scores.get(detector, {})
        for key in keys:
            answer = item.answers.get(key)
            score = by_key.get(key)
            if not _relevant(item, key) or answer is None or score is None:
                continue
            labels[key].append(answer == YES)
            scores[key].append(float(score))
    by_attribute = {key: roc_auc(labels[key], scores[key]) for key in keys}
    return RocAuc(
        detector=detector,
        setting=setting,
        by_attribute=by_attribute,
        n_positive={key: sum(labels[key]) for key in keys},
        n_negative={key: len(labels[key]) - sum(labels[key]) for key in keys},
        mean=mean_defined(by_attribute),
        n_defined=sum(v is not None for v in by_attribute.values()),
    )


@dataclass(frozen=True)
class ScoreRanking:
    """Kendall tau-b between automatic and human GEP scores across cells (Table 6's last column)."""

    kendall_tau_b: float | None
    n_cells: int


def score_ranking(
    auto_scores: Mapping[K, float | None], human_scores: Mapping[K, float | None]
) -> ScoreRanking:
    """Rank agreement of GEP scores over the cells (e.g. (model, setting)) defined in both maps."""
    cells = [c for c, v in auto_scores.items() if v is not None and human_scores.get(c) is not None]
    tau = kendall_tau_b([auto_scores[c] for c in cells], [human_scores[c] for c in cells])  # type: ignore[misc]
    return ScoreRanking(kendall_tau_b=tau, n_cells=len(cells))


# --------------------------------------------------------------------------------------------
# A whole study: the shape the report's JSON takes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DetectorCell:
    """One detector in one model x setting cell: its GEP, agreement with humans, ROC-AUC."""

    gep: AutoGep
    agreement: VectorAgreement
    roc_auc: RocAuc

    def as_dict(self) -> dict[str, Any]:
        return {
            "gep_vector": dict(self.gep.gep_vector),
            "gep_score": self.gep.gep_score,
            "kendall_tau_b": self.agreement.kendall_tau_b,
            "mcc": self.agreement.mcc,
            "pearson": self.agreement.pearson,
            "roc_auc": {"by_attribute": dict(self.roc_auc.by_attribute), "mean": self.roc_auc.mean},
        }


@dataclass(frozen=True)
class GepCell:
    """One model x setting: the human GEP and each detector's."""

    human: HumanGep
    detectors: dict[str, DetectorCell]

    def as_dict(self) -> dict[str, Any]:
        """``{n_items, frequencies, gep_vector, gep_score, n_without_final_answer, detectors}``."""
        return {
            "n_items": dict(self.human.n_items),
            "frequencies": {gender: dict(f) for gender, f in self.human.frequencies.items()},
            "gep_vector": dict(self.human.gep_vector),
            "gep_score": self.human.gep_score,
            "n_without_final_answer": {
                gender: dict(n) for gender, n in self.human.n_without_final_answer.items()
            },
            "detectors": {name: cell.as_dict() for name, cell in self.detectors.items()},
        }


def gep_cell(
    items: Iterable[GepItem],
    *,
    setting: str,
    detectors: Sequence[str] | None = None,
    keys: Sequence[str] = ATTRIBUTE_KEYS,
) -> GepCell:
    """Human GEP plus, per detector, its GEP, vector agreement and per-setting ROC-AUC.

    ``detectors`` defaults to every detector name found in the items' scores (sorted).
    """
    checked = _checked_items(items, keys)
    return _gep_cell(checked, setting, _detector_names(checked, detectors), tuple(keys))


def _detector_names(items: list[GepItem], detectors: Sequence[str] | None) -> tuple[str, ...]:
    if detectors is not None:
        return tuple(detectors)
    return tuple(sorted({name for item in items for name in item.scores}))


def _gep_cell(
    items: list[GepItem], setting: str, detectors: tuple[str, ...], keys: tuple[str, ...]
) -> GepCell:
    human = _human_gep(items, setting, keys)
    cells = {}
    for name in detectors:
        auto = _auto_gep(items, name, setting, keys)
        cells[name] = DetectorCell(
            gep=auto,
            agreement=vector_agreement(auto.gep_vector, human.gep_vector, keys),
            roc_auc=_attribute_roc_auc(items, name, setting, keys),
        )
    return GepCell(human=human, detectors=cells)


@dataclass(frozen=True)
class GepStudy:
    """All cells of a study by T2I model and setting, and each detector's score ranking."""

    cells: dict[str, dict[str, GepCell]]
    score_ranking: dict[str, ScoreRanking]

    def as_dict(self) -> dict[str, Any]:
        """``{"attributes": {model: {setting: cell}}, "score_ranking": {detector: tau or None}}``."""
        return {
            "attributes": {
                model: {setting: cell.as_dict() for setting, cell in by_setting.items()}
                for model, by_setting in self.cells.items()
            },
            "score_ranking": {name: ranking.kendall_tau_b for name, ranking in self.score_ranking.items()},
        }


def gep_study(
    items_by_model: Mapping[str, Iterable[GepItem]],
    *,
    detectors: Sequence[str] | None = None,
    keys: Sequence[str] = ATTRIBUTE_KEYS,
) -> GepStudy:
    """Every model x setting cell (settings a model has items in, neutral first) and the rankings.

    ``score_ranking[name]`` is Kendall tau-b between the detector's and the human GEP scores over
    all cells where both are defined (the paper's Table 6: 3 models x 2 settings).
    ``detectors`` defaults to every detector name found in any item's scores (sorted).
    """
    checked = {model: _checked_items(items, keys) for model, items in items_by_model.items()}
    names = _detector_names([item for items in checked.values() for item in items], detectors)
    key_tuple = tuple(keys)
    cells: dict[str, dict[str, GepCell]] = {}
    for model, items in checked.items():
        present = {item.setting for item in items}
        cells[model] = {
            setting: _gep_cell(items, setting, names, key_tuple) for setting in SETTINGS if setting in present
        }
    human_scores = {(m, s): cell.human.gep_score for m, by_s in cells.items() for s, cell in by_s.items()}
    rankings = {
        name: score_ranking(
            {
                (m, s): cell.detectors[name].gep.gep_score
                for m, by_s in cells.items()
                for s, cell in by_s.items()
            },
            human_scores,
        )
        for name in names
    }
    return GepStudy(cells=cells, score_ranking=rankings)
