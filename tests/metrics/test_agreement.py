"""metrics.agreement: hand-worked examples, scikit-learn, and the published examples."""

from __future__ import annotations

import random

import pytest
from sklearn.metrics import cohen_kappa_score

from metrics import agreement

# ------------------------------------------------------------------ Cohen's kappa


def test_cohen_kappa_of_a_hand_worked_example():
    # A: m m m f f l ; B: m m f f f l. p_o = 5/6.
    # A margins m3 f2 l1, B margins m2 f3 l1: p_e = (6 + 6 + 1) / 36 = 13/36.
    a = ["male", "male", "male", "female", "female", "low_quality"]
    b = ["male", "male", "female", "female", "female", "low_quality"]
    result = agreement.cohen_kappa(a, b, labels=["male", "female", "low_quality", "other"])
    assert result.observed_agreement == pytest.approx(5 / 6)
    assert result.expected_agreement == pytest.approx(13 / 36)
    assert result.kappa == pytest.approx((5 / 6 - 13 / 36) / (1 - 13 / 36))
    assert result.labels == ("male", "female", "low_quality", "other")
    assert result.confusion == ((2, 1, 0, 0), (0, 2, 0, 0), (0, 0, 1, 0), (0, 0, 0, 0))
    assert result.n == 6


def test_cohen_kappa_equals_scikit_learn_on_many_random_cases():
    rng = random.Random(20251027)
    labels = ["male", "female", "low_quality", "other"]
    checked = 0
    for _ in range(300):
        n = rng.randint(2, 60)
        k = rng.randint(2, 4)
        a = [rng.choice(labels[:k]) for _ in range(n)]
        # B agrees with A with a random probability, so kappa spans negative to 1.
        agree = rng.random()
        b = [x if rng.random() < agree else rng.choice(labels[:k]) for x in a]
        ours = agreement.cohen_kappa(a, b)
        if ours.kappa is None:
            assert len(set(a) | set(b)) == 1
            continue
        assert ours.kappa == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
        checked += 1
    assert checked > 250


def test_cohen_kappa_is_none_when_chance_agreement_is_one():
    result = agreement.cohen_kappa(["male"] * 5, ["male"] * 5)
    assert result.kappa is None
    assert result.observed_agreement == 1.0
    assert result.expected_agreement == 1.0


def test_cohen_kappa_of_no_items_is_empty_not_zero():
    result = agreement.cohen_kappa([], [], labels=["male", "female"])
    assert (result.kappa, result.observed_agreement, result.n) == (None, None, 0)
    assert result.confusion == ((0, 0), (0, 0))


def test_cohen_kappa_refuses_unpaired_ratings():
    with pytest.raises(ValueError, match="one pair per item"):
        agreement.cohen_kappa(["male"], ["male", "female"])


def test_labels_outside_the_given_set_are_added_to_the_confusion_matrix():
    result = agreement.cohen_kappa(["male", "alien"], ["male", "male"], labels=["male"])
    assert result.labels == ("male", "alien")
    assert result.confusion == ((1, 0), (1, 0))


# ------------------------------------------------------------------ Fleiss and Krippendorff

# Wikipedia's Fleiss example: 10 subjects, 14 raters, 5 categories -> kappa 0.210.
FLEISS_TABLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_matches_the_published_example():
    items = [[str(j) for j, c in enumerate(row) for _ in range(c)] for row in FLEISS_TABLE]
    result = agreement.fleiss_kappa(items)
    assert result.n_items == 10
    assert result.observed_agreement == pytest.approx(0.378, abs=0.0005)
    assert result.expected_agreement == pytest.approx(0.213, abs=0.0005)
    assert result.kappa == pytest.approx(0.210, abs=0.0005)


def test_fleiss_kappa_skips_items_with_one_rating_and_is_none_when_nothing_is_left():
    assert agreement.fleiss_kappa([["male"], []]).kappa is None
    assert agreement.fleiss_kappa([["male", "male"], ["male", "male"]]).kappa is None  # p_e = 1


def test_fleiss_kappa_of_perfect_agreement_is_one():
    assert agreement.fleiss_kappa([["m", "m", "m"], ["f", "f", "f"]]).kappa == pytest.approx(1.0)


# Krippendorff (2011), "Computing Krippendorff's alpha-reliability": 4 coders, 12 units, missing
# values; nominal alpha = 0.743.
KRIPPENDORFF_CODERS = [
    "1 2 3 3 2 1 4 1 2 . . .",
    "1 2 3 3 2 2 4 1 2 5 . 3",
    ". 3 3 3 2 3 4 2 2 5 1 .",
    "1 2 3 3 2 4 4 1 2 5 1 .",
]


def test_krippendorff_alpha_matches_the_published_example_with_missing_values():
    coders = [[None if v == "." else v for v in row.split()] for row in KRIPPENDORFF_CODERS]
    units = list(zip(*coders, strict=True))
    result = agreement.krippendorff_alpha_nominal(units)
    assert result.n_units == 11  # unit 12 has a single value and carries no information
    assert result.n_values == 40
    assert result.alpha == pytest.approx(0.743, abs=0.0005)


def test_krippendorff_alpha_of_identical_values_is_none():
    assert agreement.krippendorff_alpha_nominal([["m", "m"], ["m", "m"]]).alpha is None
    assert agreement.krippendorff_alpha_nominal([["m", None]]).alpha is None


def test_krippendorff_alpha_of_two_coders_equals_its_closed_form():
    # Two coders, no missing values: alpha = 1 - (n - 1) * disagreements / sum_{c != k} n_c n_k
    # with n = 2 * items. A: m m f f, B: m f f f -> 1 disagreement pair (counted twice).
    result = agreement.krippendorff_alpha_nominal([("m", "m"), ("m", "f"), ("f", "f"), ("f", "f")])
    n_m, n_f, n = 3, 5, 8
    assert result.alpha == pytest.approx(1 - (n - 1) * 2 / (2 * n_m * n_f))


# ------------------------------------------------------------------ a study's label rows


def _rows(*items):
    """Label rows (item, t2i_model, category, rater, value) from (model, category, labels...)."""
    rows = []
    for item, (model, category, *labels) in enumerate(items):
        rows += [(item, model, category, rater, value) for rater, value in labels]
    return rows


def test_agreement_summary_is_worked_by_hand():
    rows = _rows(
        ("sdxl", "job", ("anna", "m"), ("ben", "m")),
        ("sdxl", "job", ("anna", "m"), ("ben", "m")),
        ("sdxl", "job", ("anna", "f"), ("ben", "m")),
        ("sd3", "place", ("anna", "lq"), ("ben", "lq")),
        ("sd3", "place", ("anna", "f")),  # a single label: not counted
    )
    summary = agreement.agreement_summary(rows, labels=["m", "f", "lq", "o"])
    # A: m m f lq, B: m m m lq -> p_o = 3/4, p_e = (2*3 + 1*1) / 16 = 7/16, kappa = 5/9.
    assert summary.n_items == 4
    assert summary.n_labels == 8
    assert summary.cohen.kappa == pytest.approx(5 / 9)
    assert summary.cohen.kappa == pytest.approx(
        cohen_kappa_score(["m", "m", "f", "lq"], ["m", "m", "m", "lq"])
    )
    assert summary.labels == ("m", "f", "lq", "o")
    assert summary.cohen.confusion == ((2, 0, 0, 0), (1, 0, 0, 0), (0, 0, 1, 0), (0, 0, 0, 0))
    assert summary.per_t2i_model["sd3"].kappa is None  # one label used by both: p_e = 1
    assert summary.per_t2i_model["sdxl"].n == 3
    assert list(summary.per_category) == ["job", "place"]
    assert [p.raters for p in summary.per_rater_pair] == [("anna", "ben")]
    assert summary.per_rater_pair[0].kappa.kappa == pytest.approx(5 / 9)


def test_agreement_summary_with_three_raters_uses_the_first_two_for_cohen_and_all_for_fleiss():
    triples = [("m", "m", "f"), ("f", "f", "f"), ("m", "f", "m")]
    rows = _rows(*(("sdxl", "job", ("anna", a), ("ben", b), ("cleo", c)) for a, b, c in triples))
    summary = agreement.agreement_summary(rows, labels=["m", "f"])
    assert summary.cohen.kappa == pytest.approx(
        cohen_kappa_score([t[0] for t in triples], [t[1] for t in triples])
    )
    # Fleiss by hand: P_i = 1/3, 1, 1/3 -> P = 5/9; p_m = 4/9, p_f = 5/9 -> P_e = 41/81.
    assert summary.fleiss.kappa == pytest.approx((5 / 9 - 41 / 81) / (1 - 41 / 81))
    # Krippendorff by hand: D_o = 2 + 0 + 2 = 4; n = 9, totals 4 and 5 -> 1 - 8 * 4 / 40 = 0.2.
    assert summary.krippendorff.alpha == pytest.approx(0.2)
    assert summary.max_labels_per_item == 3
    assert [p.raters for p in summary.per_rater_pair] == [("anna", "ben"), ("anna", "cleo"), ("ben", "cleo")]


def test_rater_pairs_are_named_alphabetically_whatever_the_row_order():
    # cleo's row comes first on the item, but the pair is (anna, cleo) with anna as rater A.
    summary = agreement.agreement_summary(_rows(("x", "c", ("cleo", "f"), ("anna", "m"))), labels=["m", "f"])
    pair = summary.per_rater_pair[0]
    assert pair.raters == ("anna", "cleo")
    assert summary.cohen.confusion == ((0, 0), (1, 0))  # row order: cleo is rater A overall


def test_agreement_summary_of_no_rows_is_empty_not_zero():
    summary = agreement.agreement_summary([], labels=["m", "f"])
    assert (summary.n_items, summary.cohen.kappa, summary.fleiss.kappa, summary.krippendorff.alpha) == (
        0,
        None,
        None,
        None,
    )
    assert summary.as_dict()["confusion"] == [[0, 0], [0, 0]]
    assert summary.as_dict()["per_annotator_pair"] == []


def test_agreement_summary_as_dict_keeps_the_agreement_pages_keys():
    summary = agreement.agreement_summary(_rows(("x", "c", ("a", "m"), ("b", "alien"))), labels=["m"])
    data = summary.as_dict()
    assert set(data) == {
        "labels", "n_images", "n_labels", "max_labels_per_image", "cohen_kappa", "observed_agreement",
        "expected_agreement", "confusion", "per_t2i_model", "per_category", "per_annotator_pair",
        "fleiss_kappa", "krippendorff_alpha",
    }  # fmt: skip
    assert data["labels"] == ["m", "alien"]  # a value outside the label order is appended
    assert data["per_t2i_model"] == {"x": {"cohen_kappa": 0.0, "observed_agreement": 0.0, "n_images": 1}}
