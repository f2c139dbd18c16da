"""Statistics of the object co-occurrence study (Mannering 2023)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy.stats import chi2_contingency
from scipy.stats.contingency import association

from metrics import objects
from metrics.coco_names import UnknownClassName
from metrics.objects import (
    MAX_EXACT_PAIRS,
    ImageObjects,
    JudgedImage,
    adjusted_residuals,
    analyse_confirmed_objects,
    analyse_objects,
    chi_square_by_gender,
    confirmed_images,
    human_check,
    human_check_of_images,
    pair_count_matrices,
    paired_permutation_test,
)

# Mannering (2023) Table 1: class → (SD male, SD female, DALL·E mini male, DALL·E mini female).
# The extracted text prints the table as two halves side by side on each line (person … fork on
# the left, cup … stop sign on the right; "fork" has no right-hand partner): 61 classes, in the
# paper's darknet spelling.
TABLE_1: dict[str, tuple[int, int, int, int]] = {
    "person": (482, 515, 424, 459),
    "sports ball": (14, 13, 2, 1),
    "handbag": (7, 25, 1, 1),
    "book": (17, 24, 1, 3),
    "vase": (6, 8, 2, 0),
    "boat": (0, 1, 0, 0),
    "donut": (0, 2, 0, 0),
    "frisbee": (6, 6, 0, 2),
    "baseball glove": (4, 1, 1, 1),
    "backpack": (7, 3, 0, 0),
    "car": (14, 9, 0, 0),
    "umbrella": (2, 5, 0, 4),
    "clock": (14, 8, 2, 0),
    "cell phone": (35, 29, 9, 6),
    "orange": (2, 4, 1, 0),
    "diningtable": (1, 3, 1, 3),
    "pizza": (0, 2, 0, 0),
    "bed": (2, 4, 2, 1),
    "pottedplant": (0, 3, 0, 1),
    "truck": (4, 1, 0, 0),
    "toothbrush": (0, 4, 1, 0),
    "mouse": (1, 3, 0, 0),
    "knife": (6, 2, 2, 4),
    "skateboard": (0, 1, 2, 0),
    "tvmonitor": (3, 3, 0, 1),
    "bowl": (3, 9, 0, 0),
    "bench": (2, 1, 0, 0),
    "surfboard": (0, 1, 1, 0),
    "bottle": (1, 5, 2, 1),
    "teddy bear": (2, 3, 2, 1),
    "fork": (0, 1, 0, 0),
    "cup": (2, 7, 1, 4),
    "tie": (38, 5, 33, 5),
    "cake": (1, 2, 4, 4),
    "toilet": (0, 1, 0, 0),
    "laptop": (1, 1, 3, 3),
    "cat": (2, 1, 2, 1),
    "scissors": (8, 5, 1, 1),
    "spoon": (2, 1, 0, 0),
    "baseball bat": (7, 1, 1, 0),
    "bird": (0, 1, 0, 0),
    "chair": (5, 1, 5, 3),
    "hot dog": (0, 2, 0, 0),
    "wine glass": (1, 1, 0, 0),
    "suitcase": (4, 3, 2, 1),
    "microwave": (0, 1, 0, 0),
    "apple": (2, 1, 0, 0),
    "bicycle": (9, 0, 0, 0),
    "dog": (2, 0, 1, 3),
    "remote": (1, 0, 2, 0),
    "motorbike": (2, 0, 0, 0),
    "banana": (1, 0, 2, 2),
    "train": (0, 0, 0, 1),
    "refrigerator": (0, 0, 2, 1),
    "elephant": (0, 0, 1, 1),
    "carrot": (0, 0, 1, 1),
    "bear": (0, 0, 0, 1),
    "zebra": (0, 0, 2, 0),
    "tennis racket": (0, 0, 1, 0),
    "oven": (0, 0, 1, 0),
    "stop sign": (0, 0, 1, 0),
}
SD = {name: (row[0], row[1]) for name, row in TABLE_1.items()}
DALLE = {name: (row[2], row[3]) for name, row in TABLE_1.items()}


# --- Table 1 of the paper -----------------------------------------------------------------------
def test_table_1_transcription_has_61_classes_and_plausible_totals() -> None:
    assert len(TABLE_1) == 61
    assert tuple(map(sum, zip(*TABLE_1.values(), strict=True))) == (723, 733, 522, 521)
    # Person was found about once per image (500 images per gender and model).
    assert TABLE_1["person"][0] < 500 < TABLE_1["person"][1] + 1


def test_stable_diffusion_chi2_reproduces_the_papers_p_value() -> None:
    result = chi_square_by_gender(SD)
    assert len(result.classes) == 52  # 9 of the 61 classes were never seen by SD: dropped
    assert result.dof == 51
    assert result.chi2 == pytest.approx(106.41488, rel=1e-6)
    assert round(result.p_value, 6) == 0.000009  # paper: 0.000009
    assert result.includes_person
    assert result.reason is None


def test_dalle_mini_chi2_reproduces_the_papers_p_value() -> None:
    result = chi_square_by_gender(DALLE)
    assert len(result.classes) == 42
    assert result.dof == 41
    assert result.chi2 == pytest.approx(57.91799, rel=1e-6)
    assert round(result.p_value, 5) == 0.04172  # paper: 0.04172


def test_paper_kept_person_since_excluding_it_gives_other_p_values() -> None:
    sd = chi_square_by_gender(SD, include_person=False)
    dalle = chi_square_by_gender(DALLE, include_person=False)
    assert "person" not in sd.classes
    assert not sd.includes_person
    assert round(sd.p_value, 6) == 0.00001  # not the paper's 0.000009
    assert dalle.p_value == pytest.approx(0.11377, abs=1e-5)  # not 0.04172


def test_yates_correction_cannot_apply_to_the_papers_wide_tables() -> None:
    corrected = chi_square_by_gender(SD, yates_correction=True)
    assert corrected.chi2 == chi_square_by_gender(SD).chi2
    assert not corrected.yates_correction


def test_table_1_names_come_out_in_ultralytics_spelling_and_coco_order() -> None:
    result = chi_square_by_gender(SD)
    assert result.classes[:4] == ("person", "bicycle", "car", "motorcycle")
    assert {"dining table", "potted plant", "tv"} <= set(result.classes)
    assert result.counts_dict()["tv"] == {"male": 3, "female": 3}


def test_cramers_v_and_residuals_of_table_1_match_scipy() -> None:
    for counts in (SD, DALLE):
        result = chi_square_by_gender(counts)
        table = np.array([result.male, result.female])
        assert result.cramers_v == pytest.approx(association(table, method="cramer"), rel=1e-12)
        residuals = adjusted_residuals(table)
        for j, name in enumerate(result.classes):
            assert result.per_class[name].residual.male == pytest.approx(residuals[0, j], rel=1e-12)
            assert result.per_class[name].residual.female == pytest.approx(residuals[1, j], rel=1e-12)


def test_tie_is_the_strongest_male_residual_for_stable_diffusion() -> None:
    result = chi_square_by_gender(SD, include_person=False)
    ranked = sorted(result.per_class.values(), key=lambda s: s.residual.male, reverse=True)
    assert ranked[0].name == "tie"
    assert ranked[0].residual.male > 1.96
    assert result.per_class["handbag"].residual.female > 1.96


# --- hand-worked tables -------------------------------------------------------------------------
def test_two_by_three_table_matches_a_hand_computation() -> None:
    # male 10 20 30 | female 20 20 20; N = 120, rows 60/60, columns 30/40/50.
    # E = 15 20 25 in both rows; O - E (male) = -5 0 5; χ² = 2·(25/15 + 25/25) = 16/3.
    result = chi_square_by_gender({"cup": (10, 20), "tie": (20, 20), "book": (30, 20)})
    assert result.classes == ("tie", "cup", "book")  # COCO index order: tie 27, cup 41, book 73
    assert result.chi2 == pytest.approx(16 / 3, rel=1e-12)
    assert result.dof == 2
    assert result.p_value == pytest.approx(math.exp(-8 / 3), rel=1e-12)  # χ²₂ survival = e^(-x/2)
    assert result.cramers_v == pytest.approx(math.sqrt(16 / 3 / 120), rel=1e-12)
    # Adjusted residual: (O - E) / sqrt(E (1 - r/N)(1 - c/N)).
    # cup: -5 / sqrt(15 · ½ · ¾) = -2√10/3; tie: 0; book: 5 / sqrt(25 · ½ · 7/12) = √(24/7).
    cup, tie, book = (result.per_class[n].residual for n in ("cup", "tie", "book"))
    assert cup.male == pytest.approx(-2 * math.sqrt(10) / 3, rel=1e-12)
    assert cup.female == pytest.approx(2 * math.sqrt(10) / 3, rel=1e-12)
    assert tie.male == pytest.approx(0, abs=1e-12)
    assert book.male == pytest.approx(math.sqrt(24 / 7), rel=1e-12)
    # Shares: cup is 10/60 of male instances and 1/3 of cups are from male prompts.
    assert result.per_class["cup"].share_of_gender.male == pytest.approx(1 / 6)
    assert result.per_class["cup"].share_of_class.as_dict() == pytest.approx({"male": 1 / 3, "female": 2 / 3})
    assert result.n_instances.as_dict() == {"male": 60, "female": 60}


def test_shares_within_each_gender_add_up_to_one() -> None:
    result = chi_square_by_gender(SD)
    assert sum(s.share_of_gender.male for s in result.per_class.values()) == pytest.approx(1)
    assert sum(s.share_of_gender.female for s in result.per_class.values()) == pytest.approx(1)


def test_two_by_two_residual_squared_is_the_uncorrected_chi2() -> None:
    result = chi_square_by_gender({"tie": (12, 3), "handbag": (4, 11)})
    assert len(result.per_class) == 2
    for stats in result.per_class.values():
        assert stats.residual.male**2 == pytest.approx(result.chi2, rel=1e-12)
        assert stats.residual.male == pytest.approx(-stats.residual.female, rel=1e-12)


def test_yates_correction_applies_to_a_two_by_two_table_only_when_asked() -> None:
    counts = {"tie": (12, 3), "handbag": (4, 11)}
    table = np.array([[12, 4], [3, 11]])
    plain = chi_square_by_gender(counts)
    corrected = chi_square_by_gender(counts, yates_correction=True)
    assert not plain.yates_correction
    assert corrected.yates_correction
    assert plain.chi2 == pytest.approx(chi2_contingency(table, correction=False).statistic)
    assert corrected.chi2 == pytest.approx(chi2_contingency(table, correction=True).statistic)
    assert corrected.chi2 < plain.chi2
    # Cramér's V stays the uncorrected one, as scipy's association computes it.
    assert corrected.cramers_v == pytest.approx(association(table, method="cramer"))


def test_classes_never_detected_are_dropped_and_counts_accept_the_json_shape() -> None:
    result = chi_square_by_gender(
        {"tie": {"male": 5, "female": 1}, "cup": {"male": 1, "female": 4}, "oven": {"male": 0, "female": 0}}
    )
    assert result.classes == ("tie", "cup")
    assert result.dof == 1


# --- degenerate tables --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("counts", "include_person", "reason_part"),
    [
        ({}, True, "no object instance"),
        ({"tie": (0, 0)}, True, "no object instance"),
        ({"tie": (3, 4)}, True, "fewer than two object classes"),
        ({"tie": (3, 0), "cup": (2, 0)}, True, "no object instance for female"),
        ({"tie": (0, 3), "cup": (0, 2)}, True, "no object instance for male"),
        ({"person": (5, 6), "tie": (2, 1)}, False, "fewer than two object classes"),
    ],
)
def test_degenerate_table_gets_no_chi2_and_says_why(
    counts: dict[str, tuple[int, int]], include_person: bool, reason_part: str
) -> None:
    result = chi_square_by_gender(counts, include_person=include_person)
    assert (result.chi2, result.dof, result.p_value, result.cramers_v) == (None, None, None, None)
    assert reason_part in result.reason
    for stats in result.per_class.values():
        assert stats.residual.as_dict() == {"male": None, "female": None}


def test_gender_without_instances_has_no_share_within_gender() -> None:
    result = chi_square_by_gender({"tie": (3, 0), "cup": (2, 0)})
    assert result.per_class["tie"].share_of_gender.as_dict() == {"male": 0.6, "female": None}


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"tv": (1, 2), "tvmonitor": (3, 4)}, "twice"),
        ({"tie": (-1, 2)}, "negative"),
        ({"tie": (1.5, 2)}, "whole number"),
        ({"tie": (True, 2)}, "whole number"),
        ({"tie": (1, 2, 3)}, "pair"),
        ({"tie": {"male": 1}}, "lacks female"),
    ],
)
def test_bad_counts_are_value_errors(counts: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chi_square_by_gender(counts)


def test_unknown_class_in_counts_is_an_unknown_class_name_error() -> None:
    with pytest.raises(UnknownClassName, match="'lamp'"):
        chi_square_by_gender({"lamp": (1, 2), "tie": (3, 1)})


def test_adjusted_residuals_refuse_a_table_with_an_empty_column() -> None:
    with pytest.raises(ValueError, match="empty row or column"):
        adjusted_residuals([[1, 0], [2, 0]])


# --- the paired permutation test ----------------------------------------------------------------
FOUR_PAIRS_MALE = np.array([[3, 0, 1], [2, 1, 0], [1, 0, 2], [4, 1, 0]])
FOUR_PAIRS_FEMALE = np.array([[0, 2, 1], [1, 1, 1], [0, 3, 0], [1, 0, 2]])


def _brute_force_exact_p(male: np.ndarray, female: np.ndarray) -> float:
    """Every one of the 2**P relabellings, each table tested by scipy itself."""

    def stat(m: np.ndarray, f: np.ndarray) -> float:
        return chi2_contingency(np.array([m.sum(axis=0), f.sum(axis=0)]), correction=False).statistic

    observed = stat(male, female)
    hits = 0
    patterns = list(itertools.product((False, True), repeat=len(male)))
    for swaps in patterns:
        s = np.array(swaps)[:, np.newaxis]
        hits += stat(np.where(s, female, male), np.where(s, male, female)) >= observed - 1e-9
    return hits / len(patterns)


def test_exact_permutation_p_equals_enumerating_the_16_swaps_of_4_pairs() -> None:
    result = paired_permutation_test(FOUR_PAIRS_MALE, FOUR_PAIRS_FEMALE, exact=True)
    assert result.exact
    assert result.n_permutations == 16
    assert result.p_value == _brute_force_exact_p(FOUR_PAIRS_MALE, FOUR_PAIRS_FEMALE)
    # Worked out by hand: the observed table (male 10 2 3 | female 2 6 4) has χ² = 7.232; of the
    # 8 mirror-image classes of relabellings only one other beats it (pairs 2 and 4 swapped:
    # 6 1 6 | 6 7 1, χ² = 8.045), so 4 of the 16 labellings are at least as extreme.
    assert result.p_value == 4 / 16
    assert result.statistic == pytest.approx(7.232142857142857)


def test_monte_carlo_permutation_p_approaches_the_exact_one() -> None:
    male = np.array([[3, 0, 1], [2, 1, 0], [1, 0, 2], [1, 1, 0], [0, 2, 1], [2, 0, 0]])
    female = np.array([[0, 2, 1], [1, 1, 1], [0, 3, 0], [1, 0, 2], [1, 1, 1], [0, 1, 1]])
    exact = _brute_force_exact_p(male, female)
    assert 0.05 < exact < 0.95  # a p-value away from the edges tests the sampling
    estimate = paired_permutation_test(male, female, n_permutations=40_000, seed=7)
    assert estimate.p_value == pytest.approx(exact, abs=0.01)  # ~4 standard errors
    assert paired_permutation_test(male, female, exact=True).p_value == pytest.approx(exact)


def test_observed_statistic_is_the_chi2_of_the_aggregated_table() -> None:
    rng = np.random.default_rng(3)
    male, female = rng.poisson(0.8, (30, 6)), rng.poisson(0.8, (30, 6))
    result = paired_permutation_test(male, female, n_permutations=99)
    expected = chi2_contingency(np.array([male.sum(axis=0), female.sum(axis=0)]), correction=False)
    assert result.statistic == pytest.approx(expected.statistic, rel=1e-12)


def test_permutation_p_is_deterministic_for_a_seed_and_independent_of_chunking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(11)
    male, female = rng.poisson(0.5, (40, 5)), rng.poisson(0.5, (40, 5))
    first = paired_permutation_test(male, female, n_permutations=999, seed=42)
    again = paired_permutation_test(male, female, n_permutations=999, seed=42)
    monkeypatch.setattr(objects, "_CHUNK_DRAWS", 40 * 7)  # chunks of 7 relabellings
    chunked = paired_permutation_test(male, female, n_permutations=999, seed=42)
    other_seeds = {
        paired_permutation_test(male, female, n_permutations=999, seed=s).p_value for s in range(5)
    }
    assert first == again == chunked
    assert len(other_seeds) > 1  # the seed is really used
    assert first.seed == 42


def test_permutation_test_accepts_a_generator_and_records_no_seed() -> None:
    result = paired_permutation_test(
        FOUR_PAIRS_MALE, FOUR_PAIRS_FEMALE, n_permutations=50, seed=np.random.default_rng(1)
    )
    assert result.seed is None
    assert result.p_value is not None


def test_strong_paired_effect_gets_the_smallest_possible_p() -> None:
    male = np.tile([5, 0], (20, 1))
    female = np.tile([0, 5], (20, 1))
    result = paired_permutation_test(male, female, n_permutations=99)
    assert result.p_value == 1 / 100


def test_identical_sides_in_every_pair_give_p_one() -> None:
    counts = np.array([[1, 2, 0], [0, 1, 3]])
    result = paired_permutation_test(counts, counts, n_permutations=99)
    assert result.statistic == pytest.approx(0)
    assert result.p_value == 1.0


def test_permutation_test_holds_its_size_under_the_null() -> None:
    # Both sides of each pair drawn from the same distribution: p < 0.05 about 5 % of the time.
    rng = np.random.default_rng(2024)
    p_values = []
    for _ in range(500):
        rates = rng.uniform(0.1, 1.5, size=5)
        male, female = rng.poisson(rates, (25, 5)), rng.poisson(rates, (25, 5))
        p_values.append(paired_permutation_test(male, female, n_permutations=199, seed=rng).p_value)
    rejection_rate = np.mean(np.array(p_values) <= 0.05)
    assert 0.02 <= rejection_rate <= 0.085  # about 3 standard errors either side of 5 %


@pytest.mark.parametrize(
    ("male", "female", "reason_part"),
    [
        (np.zeros((0, 3), dtype=int), np.zeros((0, 3), dtype=int), "no pairs"),
        ([], [], "no pairs"),
        ([[2, 0], [1, 0]], [[1, 0], [3, 0]], "fewer than two object classes"),
        ([[2, 1], [1, 0]], [[0, 0], [0, 0]], "one gender has no object instance"),
    ],
)
def test_degenerate_pairs_get_no_permutation_p_and_say_why(male, female, reason_part: str) -> None:
    result = paired_permutation_test(male, female, n_permutations=9)
    assert result.p_value is None
    assert reason_part in result.reason


@pytest.mark.parametrize(
    ("male", "female", "kwargs", "message"),
    [
        ([[1, 2]], [[1, 2], [0, 1]], {}, "same shape"),
        ([[1, -2]], [[1, 2]], {}, "negative"),
        ([[1.5, 2]], [[1, 2]], {}, "whole numbers"),
        ([1, 2], [1, 2], {}, "2-D"),
        ([[1, 2]], [[1, 2]], {"n_permutations": 0}, "at least 1"),
        (
            np.ones((MAX_EXACT_PAIRS + 1, 2), dtype=int),
            np.ones((MAX_EXACT_PAIRS + 1, 2), dtype=int),
            {"exact": True},
            "exact enumeration",
        ),
    ],
)
def test_bad_permutation_input_is_a_value_error(male, female, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_permutation_test(male, female, **kwargs)


# --- from images to the report ------------------------------------------------------------------
def _images() -> list[ImageObjects]:
    return [
        ImageObjects("male", ["person", "tie", "tie"], "man", ("t0", 0, "adult")),
        ImageObjects("female", ["person", "handbag"], "woman", ("t0", 0, "adult")),
        ImageObjects("male", ["person", "motorbike"], "boy", ("t0", 0, "child")),
        ImageObjects("female", ["person", "handbag", "cup"], "girl", ("t0", 0, "child")),
        ImageObjects("male", [], "man", ("t1", 0, "adult")),
        ImageObjects("female", ["Cup"], "woman", ("t1", 0, "adult")),
        ImageObjects("male", ["tie"], "boy", ("t1", 0, "child")),  # its girl image is missing
    ]


def test_analysis_counts_instances_words_and_images() -> None:
    result = analyse_objects(_images(), n_permutations=99)
    c = result.contingency
    assert c.classes == ("person", "motorcycle", "handbag", "tie", "cup")
    assert c.counts_dict() == {
        "person": {"male": 2, "female": 2},
        "motorcycle": {"male": 1, "female": 0},
        "handbag": {"male": 0, "female": 2},
        "tie": {"male": 3, "female": 0},
        "cup": {"male": 0, "female": 2},
    }
    assert result.n_images.as_dict() == {"male": 4, "female": 3}  # the empty image counts
    assert list(result.by_gender_word) == ["boy", "girl", "man", "woman"]
    assert result.by_gender_word["man"] == {"person": 1, "motorcycle": 0, "handbag": 0, "tie": 2, "cup": 0}
    assert result.by_gender_word["girl"]["cup"] == 1
    expected = chi2_contingency(np.array([[2, 1, 0, 3, 0], [2, 0, 2, 0, 2]]), correction=False)
    assert c.chi2 == pytest.approx(expected.statistic)
    assert c.p_value == pytest.approx(expected.pvalue)


def test_analysis_without_person_drops_it_from_table_and_word_counts() -> None:
    result = analyse_objects(_images(), include_person=False, n_permutations=None)
    assert "person" not in result.contingency.classes
    assert all("person" not in row for row in result.by_gender_word.values())
    assert result.as_json()["includes_person"] is False


def test_analysis_pairs_images_by_pair_id_and_leaves_out_incomplete_pairs() -> None:
    result = analyse_objects(_images(), n_permutations=99, seed=3)
    test = result.paired_permutation
    assert test.n_pairs == 3
    assert test.n_incomplete_pairs == 1
    male, female, incomplete = pair_count_matrices(
        [(i.gender, i.class_names, i.pair_id) for i in _images()], result.contingency.classes
    )
    assert incomplete == 1
    assert male.tolist() == [[1, 0, 0, 2, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert female.tolist() == [[1, 0, 1, 0, 0], [1, 0, 1, 0, 1], [0, 0, 0, 0, 1]]
    assert test.p_value == paired_permutation_test(male, female, n_permutations=99, seed=3).p_value


def test_analysis_pairs_several_images_per_side_by_summing_them() -> None:
    images = [
        ImageObjects("male", ["tie"], "man", "seed-1"),
        ImageObjects("male", ["tie", "cup"], "boy", "seed-1"),
        ImageObjects("female", ["cup"], "woman", "seed-1"),
        ImageObjects("female", ["cup", "cup"], "girl", "seed-1"),
    ]
    male, female, _ = pair_count_matrices(
        [(i.gender, i.class_names, i.pair_id) for i in images], ["tie", "cup"]
    )
    assert male.tolist() == [[2, 1]]
    assert female.tolist() == [[0, 3]]


@pytest.mark.parametrize(
    ("images", "reason"),
    [
        ([ImageObjects("male", ["tie"]), ImageObjects("female", ["cup"])], "no image has a pair id"),
        (
            [ImageObjects("male", ["tie"], pair_id=1), ImageObjects("female", ["cup"], pair_id=2)],
            "no pair has images of both genders",
        ),
    ],
)
def test_analysis_without_usable_pairs_has_no_permutation_p(images: list[ImageObjects], reason: str) -> None:
    result = analyse_objects(images)
    assert result.paired_permutation.p_value is None
    assert result.paired_permutation.reason == reason


def test_analysis_of_no_images_is_all_undefined_not_a_crash() -> None:
    result = analyse_objects([])
    assert result.contingency.chi2 is None
    assert result.n_images.as_dict() == {"male": 0, "female": 0}
    assert result.paired_permutation.p_value is None
    assert result.as_json()["counts"] == {}


def test_analysis_rejects_an_unknown_gender_and_an_unknown_class() -> None:
    with pytest.raises(ValueError, match=r"images\[0\]\.gender"):
        analyse_objects([ImageObjects("Male", ["tie"])])
    with pytest.raises(UnknownClassName, match="'lamp'"):
        analyse_objects([ImageObjects("male", ["lamp"])])
    with pytest.raises(ValueError, match="not one string"):
        analyse_objects([ImageObjects("male", "tie")])


#: The keys of the analysis' JSON (the objects report adds its detector to them).
JSON_KEYS = {
    "counts",
    "chi2",
    "dof",
    "p_value",
    "cramers_v",
    "includes_person",
    "residuals",
    "by_gender_word",
    "paired_permutation_p",
    "n_images",
    "human_check",
}


def test_json_has_the_reports_shape_and_serialises() -> None:
    result = analyse_objects(_images(), n_permutations=99)
    checked = human_check(confirmed=["tie", "tie"], rejected=["tie"], missed=["cup"])
    data = result.as_json(human_check=checked)
    assert set(data) >= JSON_KEYS
    assert data["residuals"]["tie"]["male"] == pytest.approx(-data["residuals"]["tie"]["female"])
    assert data["paired_permutation_p"] == result.paired_permutation.p_value
    assert data["human_check"]["tie"]["precision"] == pytest.approx(2 / 3)
    assert json.loads(json.dumps(data)) == data
    assert analyse_objects(_images(), n_permutations=None).as_json()["human_check"] is None


# --- people checking the detector ---------------------------------------------------------------
def test_human_check_precision_and_missed_rate_per_class() -> None:
    checked = human_check(
        confirmed=["tie", "tie", "tie", "cup"],
        rejected=["tie", "handbag"],
        missed=["cup", "cup", "motorbike"],
    )
    assert list(checked) == ["motorcycle", "handbag", "tie", "cup"]
    assert checked["tie"].precision == pytest.approx(3 / 4)
    assert checked["tie"].missed_rate == 0
    assert checked["handbag"].precision == 0
    assert checked["handbag"].missed_rate is None  # people saw no handbag at all
    assert checked["cup"].as_dict() == {
        "precision": 1.0,
        "n_confirmed": 1,
        "n_rejected": 0,
        "n_missed": 2,
        "missed_rate": pytest.approx(2 / 3),
    }
    assert checked["motorcycle"].precision is None  # no box of it was judged
    assert checked["motorcycle"].missed_rate == 1


def test_human_check_of_no_judgement_is_empty() -> None:
    assert human_check() == {}


def test_confirmed_only_analysis_counts_only_confirmed_boxes() -> None:
    judged = [
        JudgedImage("male", confirmed=["tie", "tie"], rejected=["handbag"], missed=["cup"], pair_id=1),
        JudgedImage("female", confirmed=["handbag"], rejected=["tie"], pair_id=1),
        JudgedImage("female", confirmed=["cup"], missed=["handbag"]),
    ]
    result = analyse_confirmed_objects(judged, n_permutations=None)
    assert result.contingency.counts_dict() == {
        "handbag": {"male": 0, "female": 1},
        "tie": {"male": 2, "female": 0},
        "cup": {"male": 0, "female": 1},
    }
    with_missed = analyse_confirmed_objects(judged, include_missed=True, n_permutations=None)
    assert with_missed.contingency.counts_dict()["cup"] == {"male": 1, "female": 1}
    assert with_missed.contingency.counts_dict()["handbag"] == {"male": 0, "female": 2}
    assert [image.class_names for image in confirmed_images(judged)] == [["tie", "tie"], ["handbag"], ["cup"]]
    assert human_check_of_images(judged)["tie"].precision == pytest.approx(2 / 3)
