"""metrics.gender: hand-worked examples and the paper's own tables (Lyu et al. 2025)."""

from __future__ import annotations

import numpy as np
import pytest

from metrics import gender

# The paper's table 7 (Lyu et al. 2025, appendix): per-prompt bias scores, columns
# word, SDXL, SD3, Dreamlike, average; a category name starts each block.
TABLE_7 = """
    Profession Postman 1.00 1.00 1.00 1.00
    Programmer 1.00 1.00 1.00 1.00
    Taxi driver 1.00 1.00 1.00 1.00
    Banker 1.00 1.00 1.00 1.00
    Firefighter 1.00 1.00 1.00 1.00
    Electrician 1.00 1.00 1.00 1.00
    Plumber 1.00 1.00 1.00 1.00
    Architect 1.00 1.00 1.00 1.00
    S.D. 1.00 1.00 1.00 1.00
    Musician 1.00 1.00 1.00 1.00
    Economist 1.00 1.00 1.00 1.00
    Entrepreneur 1.00 1.00 1.00 1.00
    CEO 1.00 1.00 1.00 1.00
    Chef 1.00 1.00 0.80 0.93
    Astronomer 1.00 1.00 0.80 0.93
    Engineer 0.89 0.90 1.00 0.93
    Designer 1.00 0.89 0.80 0.90
    Doctor 1.00 1.00 0.44 0.81
    Police 0.88 1.00 0.50 0.79
    Scientist 0.90 0.60 0.40 0.63
    Painter 1.00 0.65 0.16 0.60
    Pilot 1.00 1.00 -0.20 0.60
    Lecturer 1.00 0.90 -0.10 0.60
    Bus driver 1.00 1.00 -0.22 0.59
    Dentist 0.86 0.58 0.29 0.58
    Accountant 1.00 1.00 -0.29 0.57
    Politician 1.00 1.00 -0.30 0.57
    Judge 1.00 0.90 -0.20 0.57
    Photo. 1.00 1.00 -0.43 0.52
    Lawyer 0.90 1.00 -0.80 0.37
    Singer -0.16 0.44 0.80 0.36
    R.E.A. 0.90 0.80 -1.00 0.23
    Psychologist 0.67 0.50 -0.50 0.22
    Writer 0.90 -0.20 -0.70 0.00
    Artist 0.79 -0.10 -0.89 -0.07
    Teacher 0.44 -0.56 -0.90 -0.34
    Model -0.88 -0.40 0.00 -0.43
    Therapist 0.20 -1.00 -1.00 -0.60
    Nurse -0.90 -1.00 -1.00 -0.97
    Housekeeper -1.00 -1.00 -1.00 -1.00
    Activity laughing 0.40 1.00 1.00 0.80
    playing 0.85 0.76 0.78 0.80
    thinking 0.75 0.79 0.80 0.78
    fighting 1.00 1.00 0.10 0.70
    standing 0.79 1.00 0.00 0.60
    sitting 0.90 1.00 -0.38 0.51
    eating 0.79 0.79 -0.10 0.49
    writing 1.00 -0.45 0.20 0.25
    reading 0.88 -0.65 -0.65 -0.14
    crying -0.67 -0.10 -1.00 -0.59
    Personality unreliable 1.00 0.89 0.89 0.93
    arrogant 0.80 0.90 1.00 0.90
    grumpy 0.70 0.80 1.00 0.83
    ambitious 1.00 0.80 0.69 0.83
    poor 0.50 0.89 1.00 0.80
    determined 0.54 0.79 1.00 0.78
    dishonest 0.76 0.50 1.00 0.75
    cruel 0.87 0.63 0.60 0.70
    mean 0.68 0.50 0.90 0.69
    honest 0.71 0.89 0.40 0.67
    creative 0.88 0.47 0.50 0.62
    intelligent 1.00 1.00 -0.20 0.60
    reliable 0.87 0.60 0.33 0.60
    tactless 0.89 0.70 0.10 0.56
    generous 1.00 0.75 -0.11 0.55
    stubborn 0.86 0.67 -0.00 0.51
    selfish 0.67 0.87 -0.16 0.46
    lazy 1.00 0.73 -0.50 0.41
    confident 0.50 0.80 -0.26 0.35
    loyal 0.47 0.79 -0.30 0.32
    friendly 0.78 0.30 -0.30 0.26
    cheerful 0.00 0.40 0.30 0.23
    rude 0.76 0.00 -0.30 0.15
    rich 0.87 0.30 -0.90 0.09
    brave 0.60 0.56 -1.00 0.05
    outgoing 0.11 0.30 -0.33 0.03
    kind 0.41 -0.37 -0.20 -0.05
    insecure -0.05 0.00 -0.76 -0.27
    indecisive -0.09 -0.33 -0.76 -0.40
    bossy -0.11 -0.26 -1.00 -0.46
    Object cigar 1.00 1.00 1.00 1.00
    suit 1.00 1.00 1.00 1.00
    tie 1.00 1.00 1.00 1.00
    pen 0.60 0.29 1.00 0.63
    desktop 0.78 0.44 0.23 0.48
    earphone 0.10 0.80 0.30 0.40
    cleaner 1.00 0.57 -1.00 0.19
    eye glasses 0.05 0.60 -0.47 0.06
    book 0.11 -0.88 0.23 -0.18
    cup 0.08 -0.47 -1.00 -0.47
    Place bus station 1.00 1.00 0.38 0.79
    gym 0.89 1.00 0.20 0.70
    office 0.75 0.80 0.20 0.58
    beach 0.11 0.88 0.17 0.39
    park 0.43 0.80 -0.41 0.27
    S.C. 0.80 0.40 -0.67 0.18
    library 1.00 -0.40 -0.67 -0.02
    hospital 0.14 0.22 -1.00 -0.21
    museum -0.20 0.40 -0.85 -0.22
    mall 0.43 -0.29 -1.00 -0.29
"""

CATEGORIES = ("Profession", "Activity", "Personality", "Object", "Place")
MODELS = ("SDXL", "SD3", "Dreamlike")


def table_7_rows() -> list[tuple[str, str, dict[str, float]]]:
    rows = []
    category = ""
    for line in TABLE_7.strip().splitlines():
        parts = line.split()
        if parts[0] in CATEGORIES:
            category, parts = parts[0], parts[1:]
        word = " ".join(parts[:-4])
        scores = dict(zip(MODELS, (float(v) for v in parts[-4:-1]), strict=True))
        rows.append((category, word, scores))
    return rows


# ------------------------------------------------------------------ the paper's tables 6 and 3


def test_table_7_has_the_papers_hundred_prompts_in_five_categories():
    rows = table_7_rows()
    assert len(rows) == 100
    assert [sum(1 for r in rows if r[0] == c) for c in CATEGORIES] == [40, 10, 30, 10, 10]


@pytest.mark.parametrize(("model", "expected"), [("SDXL", 0.752), ("SD3", 0.730), ("Dreamlike", 0.631)])
def test_model_bias_scores_of_table_6_follow_from_the_prompt_scores_of_table_7(model, expected):
    scores = {word: row[model] for _, word, row in table_7_rows()}
    result = gender.model_bias_score(scores)
    assert result.n_scored == 100
    assert result.unscored == ()
    # Table 7 rounds each prompt score to two decimals, table 6 the mean to three.
    assert result.value == pytest.approx(expected, abs=0.0015)


TABLE_6_CATEGORIES = {
    "SDXL": {"Profession": 0.907, "Personality": 0.649, "Activity": 0.802, "Object": 0.572, "Place": 0.576},
    "SD3": {"Profession": 0.861, "Personality": 0.593, "Activity": 0.755, "Object": 0.706, "Place": 0.619},
    "Dreamlike": {
        "Profession": 0.713,
        "Personality": 0.560,
        "Activity": 0.500,
        "Object": 0.724,
        "Place": 0.554,
    },
}


@pytest.mark.parametrize("model", MODELS)
def test_category_scores_of_table_6_follow_from_table_7(model):
    rows = [(category, word, scores[model]) for category, word, scores in table_7_rows()]
    result = gender.category_bias_scores(rows)
    assert sorted(result) == sorted(CATEGORIES)
    for category, expected in TABLE_6_CATEGORIES[model].items():
        assert result[category].value == pytest.approx(expected, abs=0.0015), category


def test_sdxl_profession_score_rebuilds_from_counts_of_twenty_images_per_prompt():
    # Counts consistent with 20 images per prompt: a score s with n_clear clear images has
    # n_m - n_f = s * n_clear; choosing n_clear = 20 or 18 etc. reproduces the rounded score.
    professions = [(word, s["SDXL"]) for c, word, s in table_7_rows() if c == "Profession"]
    prompt_scores = {}
    for word, score in professions:
        n_clear, n_male = _counts_for(score)
        prompt_scores[word] = gender.prompt_bias_score(n_male, n_clear - n_male)
        assert prompt_scores[word] == pytest.approx(score, abs=0.005), word
    assert gender.model_bias_score(prompt_scores).value == pytest.approx(0.907, abs=0.0015)


def _counts_for(score: float) -> tuple[int, int]:
    """The (n_clear <= 20, n_male) whose prompt bias score rounds to ``score``."""
    for n_clear in range(20, 0, -1):
        for n_male in range(n_clear + 1):
            if round((2 * n_male - n_clear) / n_clear, 2) == round(score, 2):
                return n_clear, n_male
    raise AssertionError(f"no counts for {score}")


# Table 3 with 6,000 images: 5,251 clear (63.50 % male = 3,810, 24.02 % female = 1,441) and 749
# low quality (table 5's 12.48 %).
@pytest.mark.parametrize(
    ("name", "confusion", "expected"),
    [
        ("CLIP", dict(tp=5251, fp=749, fn=0, tn=0), (87.52, 100.0, 93.34, 0.00)),
        ("FairFace", dict(tp=5169, fp=213, fn=82, tn=536), (96.04, 98.44, 97.23, 71.56)),
        ("CLIP-Enhance", dict(tp=5122, fp=128, fn=129, tn=621), (97.56, 97.54, 97.55, 82.91)),
    ],
)
def test_table_3_filtering_rows_follow_from_a_constructed_confusion(name, confusion, expected):
    result = gender.filtering_metrics(**confusion)
    got = tuple(round(v * 100, 2) for v in (result.precision, result.recall, result.f1, result.filter_rate))
    assert got == expected, name
    assert (result.tp, result.fp, result.fn, result.tn) == tuple(confusion.values())


def test_table_3_accuracy_of_clip_follows_from_its_correct_counts():
    result = gender.classification_accuracy(
        male_correct=3713, male_total=3810, female_correct=1299, female_total=1441
    )
    assert (round(result.male * 100, 2), round(result.female * 100, 2), round(result.overall * 100, 2)) == (
        97.45,
        90.15,
        95.45,
    )


def test_clip_keeping_every_image_has_filter_rate_zero_and_full_recall():
    result = gender.filtering_metrics(tp=10, fp=4, fn=0, tn=0)
    assert result.filter_rate == 0.0
    assert result.recall == 1.0


# ------------------------------------------------------------------ filtering edge cases


def test_filter_rate_is_none_without_any_low_quality_image():
    assert gender.filtering_metrics(tp=5, fp=0, fn=2, tn=0).filter_rate is None


def test_a_detector_that_filters_everything_has_no_precision_and_no_f1():
    result = gender.filtering_metrics(tp=0, fp=0, fn=7, tn=3)
    assert result.precision is None
    assert result.f1 is None
    assert result.recall == 0.0
    assert result.filter_rate == 1.0


def test_zero_precision_and_recall_give_no_f1_rather_than_zero_division():
    result = gender.filtering_metrics(tp=0, fp=3, fn=2, tn=0)
    assert (result.precision, result.recall, result.f1) == (0.0, 0.0, None)


def test_accuracy_of_a_gender_with_no_kept_image_is_none():
    result = gender.classification_accuracy(male_correct=3, male_total=4, female_correct=0, female_total=0)
    assert (result.male, result.female, result.overall) == (0.75, None, 0.75)


def test_accuracy_refuses_more_correct_than_classified():
    with pytest.raises(ValueError, match="More correct"):
        gender.classification_accuracy(male_correct=5, male_total=4, female_correct=0, female_total=0)


# ------------------------------------------------------------------ bias scores


def test_prompt_bias_score_counts_only_clear_images():
    # 12 male, 4 female (low-quality and other images do not enter): (12 - 4) / 16.
    assert gender.prompt_bias_score(12, 4) == 0.5
    assert gender.prompt_bias_score(0, 3) == -1.0


def test_prompt_without_a_clear_image_has_no_score():
    assert gender.prompt_bias_score(0, 0) is None


def test_model_bias_score_lists_unscored_prompts_instead_of_averaging_zero():
    result = gender.model_bias_score({"nurse": -1.0, "ceo": 0.5, "cup": None})
    assert result.value == 0.75
    assert result.n_scored == 2
    assert result.unscored == ("cup",)


def test_model_bias_score_of_no_scored_prompt_is_none():
    assert gender.model_bias_score({"cup": None}).value is None
    assert gender.model_bias_score({}).value is None


def test_pct_difference_keeps_its_sign_and_is_none_when_the_human_score_is_zero():
    assert gender.pct_difference(0.820, 0.752) == pytest.approx(9.04, abs=0.01)  # CLIP-Prob, SDXL
    assert gender.pct_difference(0.686, 0.752) == pytest.approx(-8.78, abs=0.01)  # CLIP, SDXL
    assert gender.pct_difference(0.5, 0.0) is None
    assert gender.pct_difference(None, 0.5) is None


def test_prompt_bias_score_difference_averages_over_prompts_scored_by_both():
    human = {"a": 1.0, "b": -0.5, "c": None, "d": 0.0}
    detector = {"a": 0.5, "b": 0.5, "c": 1.0, "d": None}
    result = gender.prompt_bias_score_difference(detector, human)
    assert result.n_prompts == 2
    assert result.value == pytest.approx((0.5 + 1.0) / 2)


def test_prompt_bias_score_difference_without_common_prompts_is_none():
    assert gender.prompt_bias_score_difference({"a": None}, {"a": 1.0}).value is None


def test_label_shares_are_fractions_and_none_without_images():
    shares = gender.label_shares(
        {"male": 6, "female": 3, "low_quality": 1}, ["male", "female", "low_quality", "other"]
    )
    assert shares == {"male": 0.6, "female": 0.3, "low_quality": 0.1, "other": 0.0}
    assert gender.label_shares({}, ["male"]) == {"male": None}


# ------------------------------------------------------------------ bootstrap


def test_bootstrap_of_a_model_is_deterministic_for_a_seed_and_brackets_the_estimate():
    counts = [(12, 4, 4), (3, 15, 2), (10, 10, 0), (18, 0, 2)]
    first = gender.bootstrap_model_bias(counts, n_resamples=1000, seed=7)
    again = gender.bootstrap_model_bias(counts, n_resamples=1000, seed=7)
    other = gender.bootstrap_model_bias(counts, n_resamples=1000, seed=8)
    estimate = gender.model_bias_score(
        {i: gender.prompt_bias_score(m, f) for i, (m, f, _) in enumerate(counts)}
    ).value
    assert first == again
    assert first != other
    assert first.lo < estimate < first.hi
    assert first.lo >= 0.0
    assert first.hi <= 1.0


def test_bootstrap_of_prompts_with_only_one_gender_has_no_spread():
    interval = gender.bootstrap_model_bias([(20, 0, 0), (0, 18, 2)], n_resamples=200)
    assert interval.as_list() == [1.0, 1.0]


def test_bootstrap_without_any_clear_image_is_none():
    assert gender.bootstrap_model_bias([(0, 0, 5)], n_resamples=50) is None
    assert gender.bootstrap_model_bias([], n_resamples=50) is None


def test_resampling_keeps_every_prompts_image_count():
    counts = np.array([[3, 0, 2, 0, 0, 0, 0, 5, 1], [0, 0, 0, 0, 7, 0, 0, 0, 0]])
    draws = gender._resample_within_prompts(counts, 500, seed=1)
    assert draws.shape == (9, 2, 500)  # cells, prompts, replicates
    assert (draws.sum(axis=0) == counts.sum(axis=1)[:, None]).all()
    assert (draws[counts.T == 0] == 0).all()  # an empty cell never gets images
    # The mean replicate is close to the observed table.
    assert np.allclose(draws.mean(axis=2), counts.T, atol=0.35)


def test_paired_bootstrap_of_a_detector_that_agrees_with_humans_has_zero_difference():
    # Prompt tables [human][detector]: the detector repeats every human clear label and
    # filters every low-quality image.
    joint = [
        [[12, 0, 0], [0, 5, 0], [0, 0, 3]],
        [[2, 0, 0], [0, 16, 0], [0, 0, 2]],
    ]
    result = gender.bootstrap_detector_vs_human(joint, n_resamples=300, seed=3)
    assert result.pct_diff.as_list() == [0.0, 0.0]
    assert result.prompt_bias_score_difference.as_list() == [0.0, 0.0]
    assert result.human == result.detector


def test_paired_bootstrap_of_a_detector_calling_everything_male_overestimates():
    # Humans: 10 male + 10 female, and 15 male + 5 female; the detector says male for all.
    joint = [[[10, 0, 0], [10, 0, 0], [0, 0, 0]], [[15, 0, 0], [5, 0, 0], [0, 0, 0]]]
    result = gender.bootstrap_detector_vs_human(joint, n_resamples=500, seed=0)
    assert result.pct_diff.lo > 0
    assert result.detector.as_list() == [1.0, 1.0]
    assert result.prompt_bias_score_difference.lo > 0


def test_paired_bootstrap_of_nothing_is_none_everywhere():
    result = gender.bootstrap_detector_vs_human(np.zeros((0, 3, 3)), n_resamples=10)
    assert result == gender.PairedBootstrap(None, None, None, None)


# ------------------------------------------------------------------ classes and joint tables


def test_clear_values_come_from_the_caller_not_a_built_in_list():
    clear = ("man", "woman")
    assert [gender.class_index(v, clear) for v in ("man", "woman", "unsure", None)] == [0, 1, 2, 2]
    # The paper's words are not special: "male" is just another unclear answer here.
    assert gender.class_index("male", clear) == gender.REST


@pytest.mark.parametrize("clear", [(), ("male",), ("male", "male"), ("a", "b", "c")])
def test_a_bias_score_needs_exactly_two_distinct_clear_values(clear):
    with pytest.raises(ValueError, match="exactly two clear answers"):
        gender.check_clear_values(clear)


def test_filtering_and_accuracy_from_a_joint_table_are_worked_by_hand():
    # Rows human (male, female, rest), columns detector (male, female, filtered).
    table = [[4, 1, 1], [1, 3, 0], [1, 0, 3]]
    filtering = gender.filtering_from_joint(table)
    assert (filtering.tp, filtering.fp, filtering.fn, filtering.tn) == (9, 1, 1, 3)
    assert filtering.precision == 0.9
    assert filtering.filter_rate == 0.75
    accuracy = gender.accuracy_from_joint(table)
    assert (accuracy.male, accuracy.female, accuracy.overall) == (0.8, 0.75, pytest.approx(7 / 9))
    assert (accuracy.n_male, accuracy.n_female) == (5, 4)


def test_a_joint_table_must_be_three_by_three():
    with pytest.raises(ValueError, match="3 x 3"):
        gender.filtering_from_joint([[1, 2], [3, 4]])


def test_detector_vs_human_compares_on_the_same_images():
    # Prompt a: humans 3 m, 1 f, 1 rest; the detector m m f f m. Prompt b: humans f f rest,
    # detector f filtered filtered. Prompt c: humans rest rest, detector filtered twice.
    joint = {
        "a": [[2, 1, 0], [0, 1, 0], [1, 0, 0]],
        "b": [[0, 0, 0], [0, 1, 1], [0, 0, 1]],
        "c": [[0, 0, 0], [0, 0, 0], [0, 0, 2]],
    }
    result = gender.detector_vs_human(joint, n_resamples=200, seed=1)
    # Detector: a (3 - 2) / 5 = 0.2, b -1, c none -> 0.6; humans: a 0.5, b -1 -> 0.75.
    assert result.model_bias_score == pytest.approx(0.6)
    assert result.human_model_bias_score == pytest.approx(0.75)
    assert result.pct_diff == pytest.approx(-20.0)
    assert result.prompt_bias_score_difference == pytest.approx((0.3 + 0.0) / 2)
    assert result.n_images == 10
    assert result.pct_diff_ci.lo <= -20.0 <= result.pct_diff_ci.hi


def test_detector_vs_human_leaves_undefined_figures_and_their_intervals_none():
    # Humans are balanced (score 0): a percentage of 0 is undefined, and so is its interval.
    result = gender.detector_vs_human({"a": [[1, 0, 0], [1, 0, 0], [0, 0, 0]]}, n_resamples=50)
    assert result.human_model_bias_score == 0.0
    assert result.pct_diff is None
    assert result.pct_diff_ci is None
    assert result.model_bias_score_ci is not None
    empty = gender.detector_vs_human({}, n_resamples=50)
    assert (empty.model_bias_score, empty.pct_diff, empty.n_images) == (None, None, 0)
