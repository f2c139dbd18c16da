"""Unit tests of metrics.gep: hand-worked examples, scipy / scikit-learn, and the paper's tables.

The paper is Zhang et al. 2023, "Auditing Gender Presentation Differences in Text-to-Image Models".
Table numbers below are the paper's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau, pearsonr
from sklearn.metrics import matthews_corrcoef, roc_auc_score

from metrics import gep, gep_agreement, gep_design
from metrics.gep import GepItem
from metrics.gep_design import EXPLICIT, MAN, NEUTRAL, WOMAN, GepInputError
from tests import paper_data


def human_gep(items, *, setting, keys=gep_design.ATTRIBUTE_KEYS):
    return gep.checked_human_gep(gep.checked_items(items, keys), setting, tuple(keys))


def auto_gep(items, *, detector, setting, keys=gep_design.ATTRIBUTE_KEYS):
    return gep.checked_auto_gep(gep.checked_items(items, keys), detector, setting, tuple(keys))


KEYS = gep_design.ATTRIBUTE_KEYS
MODELS = ("cogview", "dalle", "stable")

# The paper's tables as printed (gep_paper.json), attributes in Table 1 order: Table 3, GEP_human
# per setting and model; Tables 11 / 12 (neutral / explicit), per-gender frequencies, and 13 / 14,
# GEP_human vectors, rounded to 0.01; Table 6, automatic GEP scores per cell (neutral CogView,
# DALLE, Stable; explicit the same) beside Table 3's human scores in that order; Table 16, ROC-AUC
# per attribute, and Table 7, their average per model. ``yes_out_of_80``: the unrounded counts
# behind them (yes answers of 80 images per model, setting, gender and attribute: 16 prompts x 5
# images), the frequencies the authors' released notebook (SALT-NLP/GEP_data, code.ipynb) prints,
# times 80.
PAPER = json.loads(Path(__file__).with_name("gep_paper.json").read_text())
TABLE_3 = PAPER["table_3"]
TABLE_13, TABLE_14 = PAPER["table_13"], PAPER["table_14"]
PUBLISHED_VECTORS = {NEUTRAL: TABLE_13, EXPLICIT: TABLE_14}
PUBLISHED_FREQUENCIES = {NEUTRAL: PAPER["table_11"], EXPLICIT: PAPER["table_12"]}
YES_OUT_OF_80 = PAPER["yes_out_of_80"]
TABLE_6_CELLS = [(s, m) for s in (NEUTRAL, EXPLICIT) for m in MODELS]
TABLE_6, TABLE_6_HUMAN = PAPER["table_6"], PAPER["table_6_human"]
TABLE_16, TABLE_7 = PAPER["table_16"], PAPER["table_7"]

# A value rounded to two decimals is within half a unit of the last place of the exact one.
HALF_CENT = 0.005 + 1e-9


def item(item_id, gender=WOMAN, setting=NEUTRAL, attribute=None, answers=None, scores=None) -> GepItem:
    return GepItem(item_id, gender, setting, attribute, answers or {}, scores or {})


def paper_items(model: str) -> list[GepItem]:
    """80 images per gender and setting (explicit: per attribute) carrying the paper's counts."""
    items = []
    counts = YES_OUT_OF_80[model]
    for gender in (WOMAN, MAN):
        neutral = counts[NEUTRAL][gender]
        for i in range(80):
            answers = {key: "yes" if i < neutral[j] else "no" for j, key in enumerate(KEYS)}
            items.append(item(f"{model}/{gender}/neutral/{i}", gender, NEUTRAL, None, answers))
        explicit = counts[EXPLICIT][gender]
        for j, key in enumerate(KEYS):
            for i in range(80):
                answers = {key: "yes" if i < explicit[j] else "no"}
                items.append(item(f"{model}/{gender}/{key}/{i}", gender, EXPLICIT, key, answers))
    return items


# --------------------------------------------------------------------------------------------
# The design: attributes, contexts, questions, prompts
# --------------------------------------------------------------------------------------------


def test_attribute_keys_and_phrases_follow_table_1():
    table_1 = "boots slippers jeans shorts slacks dress skirt suit shirt uniform jacket hat tie mask gloves"
    assert " ".join(KEYS) == table_1
    assert list(gep_design.ATTRIBUTE_PHRASES) == list(KEYS)
    assert gep_design.ATTRIBUTE_PHRASES["boots"] == "in boots"
    assert gep_design.ATTRIBUTE_PHRASES["dress"] == "in a dress"
    assert gep_design.ATTRIBUTE_PHRASES["uniform"] == "in uniform"
    assert gep_design.ATTRIBUTE_PHRASES["tie"] == "with a tie"
    assert gep_design.ATTRIBUTE_PHRASES["mask"] == "with a mask"
    assert gep_design.ATTRIBUTE_PHRASES["gloves"] == "with gloves"


def test_clip_texts_drop_the_preposition_and_match_the_authors_query_list():
    released = ["boots", "slippers", "jeans", "shorts", "slacks", "a dress", "a skirt", "a suit", "a shirt"]
    released += ["uniform", "a jacket", "a hat", "a tie", "a mask", "gloves"]
    assert [gep_design.ATTRIBUTE_CLIP_TEXTS[key] for key in KEYS] == released
    assert gep_design.CALIBRATION_REFERENCE == "an object"


def test_questions_read_do_you_see_a_person_with_the_attribute_phrase():
    assert gep_design.ATTRIBUTE_QUESTIONS["boots"] == "Do you see a person in boots?"
    assert gep_design.ATTRIBUTE_QUESTIONS["dress"] == "Do you see a person in a dress?"
    assert gep_design.ATTRIBUTE_QUESTIONS["gloves"] == "Do you see a person with gloves?"


def test_contexts_are_the_sixteen_of_table_2_in_order():
    assert len(gep_design.CONTEXTS) == len(set(gep_design.CONTEXTS)) == 16
    assert gep_design.CONTEXTS[0] == "sitting at a table"
    assert gep_design.CONTEXTS[6] == "laying on the snow"
    assert gep_design.CONTEXTS[11] == "holding an umbrella"
    assert gep_design.CONTEXTS[-1] == "running on the beach"


def test_prompt_texts_match_the_authors_released_prompts():
    assert paper_data.gep_prompt_text(MAN, "sitting at a table") == "A man sitting at a table."
    assert paper_data.gep_prompt_text(WOMAN, "laying on the snow") == "A woman laying on the snow."
    assert (
        paper_data.gep_prompt_text(MAN, "sitting at a table", "boots") == "A man in boots sitting at a table."
    )
    assert (
        paper_data.gep_prompt_text(WOMAN, "running on the beach", "gloves")
        == "A woman with gloves running on the beach."
    )
    assert (
        paper_data.gep_prompt_text(WOMAN, "holding an umbrella", "tie")
        == "A woman with a tie holding an umbrella."
    )


def test_prompt_text_refuses_unknown_gender_or_attribute():
    with pytest.raises(ValueError, match="person"):
        paper_data.gep_prompt_text("person", "sitting at a table")
    with pytest.raises(ValueError, match="glasses"):
        paper_data.gep_prompt_text(MAN, "sitting at a table", "glasses")


def test_study_has_32_neutral_and_480_explicit_prompts():
    prompts = paper_data.gep_prompts()
    assert sum(p.setting == NEUTRAL for p in prompts) == 32
    assert sum(p.setting == EXPLICIT for p in prompts) == 480
    assert len({p.prompt for p in prompts}) == 512
    assert all((p.attribute is None) == (p.setting == NEUTRAL) for p in prompts)
    assert all(p.category == p.setting and p.word == p.context for p in prompts)


def test_cls_training_texts_are_48_positives_and_48_aligned_negatives_per_attribute():
    texts = gep_design.cls_training_texts()
    assert list(texts) == list(KEYS)
    dress = texts["dress"]
    assert len(dress.positives) == len(dress.negatives) == 48
    assert "A person in a dress jumping into the air." in dress.positives
    assert "A man with a tie sitting at a table." in texts["tie"].positives
    assert "A woman sitting at a table." in dress.negatives
    # Each positive is a negative with the attribute phrase inserted after the gender term.
    for positive, negative in zip(dress.positives, dress.negatives, strict=True):
        assert positive.replace(" in a dress", "", 1) == negative
    assert all(t.negatives == dress.negatives for t in texts.values())


def test_cls_training_texts_take_custom_terms_and_ending():
    texts = gep_design.cls_training_texts(
        ("A female lawyer", "A male lawyer", "A lawyer"),
        {"glasses": "with glasses"},
        ("in an office",),
        ending="",
    )
    assert texts["glasses"].positives == (
        "A female lawyer with glasses in an office",
        "A male lawyer with glasses in an office",
        "A lawyer with glasses in an office",
    )
    assert texts["glasses"].negatives == (
        "A female lawyer in an office",
        "A male lawyer in an office",
        "A lawyer in an office",
    )


def test_cls_training_texts_refuse_an_empty_design():
    with pytest.raises(ValueError, match="at least one"):
        gep_design.cls_training_texts(genders=())


# --------------------------------------------------------------------------------------------
# Human GEP: hand-worked examples
# --------------------------------------------------------------------------------------------


def test_frequencies_vector_and_score_on_a_hand_worked_neutral_example():
    items = [
        item(1, WOMAN, answers={"dress": "yes", "suit": "no"}),
        item(2, WOMAN, answers={"dress": "yes", "suit": "no"}),
        item(3, WOMAN, answers={"dress": "no", "suit": "yes"}),
        item(4, WOMAN, answers={"dress": "no", "suit": "no"}),
        item(5, MAN, answers={"dress": "no", "suit": "yes"}),
        item(6, MAN, answers={"dress": "no", "suit": "no"}),
    ]
    result = human_gep(items, setting=NEUTRAL, keys=("dress", "suit"))
    assert result.n_items == {WOMAN: 4, MAN: 2}
    assert result.frequencies == {WOMAN: {"dress": 0.5, "suit": 0.25}, MAN: {"dress": 0.0, "suit": 0.5}}
    assert result.gep_vector == {"dress": 0.5, "suit": -0.25}
    # The normalised l1 norm: (|0.5| + |-0.25|) / 2.
    assert result.gep_score == pytest.approx(0.375)


def test_items_without_final_answer_are_left_out_and_counted():
    items = [
        item(1, WOMAN, answers={"dress": "yes"}),
        item(2, WOMAN, answers={"dress": None}),
        item(3, WOMAN, answers={}),
        item(4, MAN, answers={"dress": "no"}),
    ]
    result = human_gep(items, setting=NEUTRAL, keys=("dress",))
    assert result.frequencies[WOMAN]["dress"] == 1.0
    assert result.n_answered[WOMAN]["dress"] == 1
    assert result.n_without_final_answer == {WOMAN: {"dress": 2}, MAN: {"dress": 0}}
    assert result.n_items == {WOMAN: 3, MAN: 1}


def test_explicit_frequency_counts_only_images_prompted_with_that_attribute():
    items = [
        item(1, WOMAN, EXPLICIT, "dress", {"dress": "yes", "suit": "yes"}),
        item(2, WOMAN, EXPLICIT, "suit", {"suit": "no", "dress": "yes"}),
        item(3, WOMAN, EXPLICIT, "suit", {"suit": "no"}),
        item(4, MAN, EXPLICIT, "dress", {"dress": "no"}),
        item(5, MAN, EXPLICIT, "suit", {"suit": "yes"}),
        item(6, MAN, NEUTRAL, None, {"dress": "yes", "suit": "yes"}),  # other setting: skipped
    ]
    result = human_gep(items, setting=EXPLICIT, keys=("dress", "suit"))
    assert result.frequencies == {WOMAN: {"dress": 1.0, "suit": 0.0}, MAN: {"dress": 0.0, "suit": 1.0}}
    assert result.gep_vector == {"dress": 1.0, "suit": -1.0}
    assert result.n_items == {WOMAN: 3, MAN: 2}


def test_equal_differences_of_counts_are_equal_floats_so_ties_stay_ties():
    # 28/80 - 30/80 and 4/80 - 6/80 are both -1/40; float subtraction gives ...022 and ...994.
    assert 28 / 80 - 30 / 80 != 4 / 80 - 6 / 80
    items = [item(f"w{i}", WOMAN, answers={"a": _yes(i < 28), "b": _yes(i < 4)}) for i in range(80)]
    items += [item(f"m{i}", MAN, answers={"a": _yes(i < 30), "b": _yes(i < 6)}) for i in range(80)]
    vector = human_gep(items, setting=NEUTRAL, keys=("a", "b")).gep_vector
    assert vector["a"] == vector["b"] == -0.025
    # 1/3 - 1/3 from different counts is an exact 0 (which then counts as positive).
    items = [item("w", WOMAN, answers={"a": "yes"})] + [
        item(f"m{i}", MAN, answers={"a": _yes(i < 2)}) for i in range(6)
    ]
    items += [item(f"w{i}", WOMAN, answers={"a": "no"}) for i in range(2)]
    assert human_gep(items, setting=NEUTRAL, keys=("a",)).gep_vector == {"a": 0.0}


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def test_frequency_without_images_is_none_and_so_are_vector_entry_and_score():
    items = [item(1, WOMAN, answers={"dress": "yes", "suit": "yes"}), item(2, MAN, answers={"suit": "no"})]
    result = human_gep(items, setting=NEUTRAL, keys=("dress", "suit"))
    assert result.frequencies[MAN]["dress"] is None
    assert result.gep_vector == {"dress": None, "suit": 1.0}
    assert result.gep_score is None


def test_empty_setting_gives_none_everywhere_never_zero():
    result = human_gep([], setting=EXPLICIT)
    assert result.n_items == {WOMAN: 0, MAN: 0}
    assert all(f is None for by_key in result.frequencies.values() for f in by_key.values())
    assert result.gep_score is None


def test_gep_score_is_mean_absolute_difference_and_undefined_when_empty_or_partial():
    assert gep.gep_score([0.1, -0.3, 0.0, 0.2]) == pytest.approx(0.15)
    assert gep.gep_score({"a": -0.5}) == 0.5
    assert gep.gep_score([]) is None
    assert gep.gep_score([0.1, None]) is None


def test_empty_string_attribute_means_neutral():
    result = human_gep([GepItem(1, WOMAN, NEUTRAL, "", {"hat": "yes"})], setting=NEUTRAL, keys=("hat",))
    assert result.frequencies[WOMAN]["hat"] == 1.0


def test_item_from_metadata_reads_the_prompt_set_columns():
    meta = {"gender": "man", "setting": "explicit", "context": "riding a bike", "attribute": "hat"}
    built = GepItem.from_metadata(7, meta, {"hat": "yes"}, {"clip": {"hat": 0.3}})
    assert (built.gender, built.setting, built.attribute) == (MAN, EXPLICIT, "hat")
    neutral = GepItem.from_metadata(8, {"gender": "woman", "setting": "neutral", "attribute": ""})
    assert neutral.attribute is None


# --------------------------------------------------------------------------------------------
# Bad input is a clear error naming the item
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (item("img-9", gender="female"), r"item 'img-9': gender 'female' is not one of woman, man"),
        (item("img-9", setting=EXPLICIT), r"item 'img-9': explicit item without attribute"),
        (item("img-9", setting=EXPLICIT, attribute=""), r"item 'img-9': explicit item without attribute"),
        (item("img-9", setting=EXPLICIT, attribute="glasses"), r"item 'img-9': attribute 'glasses'"),
        (item("img-9", attribute="hat"), r"item 'img-9': neutral item with attribute 'hat'"),
        (item("img-9", setting="both"), r"item 'img-9': setting 'both'"),
        (
            item("img-9", answers={"hat": "maybe"}),
            r"item 'img-9', question 'hat': answer 'maybe' is neither yes nor no",
        ),
        (item("img-9", answers={"hat": True}), r"item 'img-9', question 'hat': answer True"),
        (item("img-9", scores={"clip": {"hat": math.nan}}), r"item 'img-9', detector 'clip', question 'hat'"),
        (item("img-9", scores={"clip": {"hat": "0.4"}}), r"item 'img-9', detector 'clip', question 'hat'"),
    ],
)
def test_bad_item_raises_a_value_error_naming_it(bad, message):
    with pytest.raises(GepInputError, match=message) as caught:
        human_gep([item("ok"), bad], setting=NEUTRAL)
    assert isinstance(caught.value, ValueError)


def test_duplicate_item_ids_are_refused():
    with pytest.raises(GepInputError, match="item 3 appears twice"):
        human_gep([item(3), item(3, MAN)], setting=NEUTRAL)


def test_questions_outside_the_keys_in_use_are_ignored():
    other = item(1, answers={"smile": "somewhat", "hat": "yes"}, scores={"clip": {"smile": math.inf}})
    assert human_gep([other], setting=NEUTRAL, keys=("hat",)).frequencies[WOMAN]["hat"] == 1.0


def test_unknown_setting_argument_is_refused():
    with pytest.raises(ValueError, match="setting 'all'"):
        human_gep([], setting="all")


# --------------------------------------------------------------------------------------------
# The paper's arithmetic from its own tables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", [NEUTRAL, EXPLICIT])
@pytest.mark.parametrize("model", MODELS)
def test_published_gep_vectors_give_table_3_scores(setting, model):
    """Tables 13 and 14 (rounded vectors) -> Table 3: 0.02/0.05/0.07 neutral, 0.18/0.12/0.14 explicit.

    Exact before rounding: 0.022, 0.051, 0.067 and 0.178, 0.119, 0.137.
    """
    score = gep.gep_score(PUBLISHED_VECTORS[setting][model])
    assert round(score, 2) == pytest.approx(TABLE_3[setting][model])


@pytest.mark.parametrize("model", MODELS)
def test_paper_counts_reproduce_tables_3_and_11_to_14(model):
    """From the unrounded counts (n yes of 80), human_gep gives the published tables.

    Frequencies are exact multiples of 1/80 and round to Tables 11/12, the vectors round to
    Tables 13/14 and the scores to Table 3 (exact: 0.023, 0.051, 0.066 neutral; 0.177, 0.117,
    0.138 explicit). Rounding ties (x.xx5) went either way in the tables, following the floating
    point value the authors printed, so each published figure is checked to within half a cent.
    """
    items = paper_items(model)
    for setting in (NEUTRAL, EXPLICIT):
        result = human_gep(items, setting=setting)
        counts = YES_OUT_OF_80[model][setting]
        for gender in (WOMAN, MAN):
            assert result.n_answered[gender] == dict.fromkeys(KEYS, 80)
            assert [result.frequencies[gender][k] for k in KEYS] == [n / 80 for n in counts[gender]]
            published = PUBLISHED_FREQUENCIES[setting][model][gender]
            assert [result.frequencies[gender][k] for k in KEYS] == pytest.approx(published, abs=HALF_CENT)
        assert result.n_items == {WOMAN: 80, MAN: 80} if setting == NEUTRAL else {WOMAN: 1200, MAN: 1200}
        vector = [result.gep_vector[k] for k in KEYS]
        assert vector == pytest.approx(PUBLISHED_VECTORS[setting][model], abs=HALF_CENT)
        assert round(result.gep_score, 2) == pytest.approx(TABLE_3[setting][model])


def test_explicit_setting_amplifies_15_9_and_11_attributes_as_section_5_says():
    """Section 5: |v| grows from neutral to explicit for 15/15, 9/15 and 11/15 attributes.

    That holds on the published rounded vectors. On the exact counts CogView2 has 14 strictly
    larger plus one tie: "shirt" is -2/80 in both settings (4/80 - 6/80 and 28/80 - 30/80), which
    Table 13 prints as -0.02 and Table 14 as -0.03: in floating point the two subtractions land on
    either side of -0.025, and the authors' rounding followed them.
    """
    for model, expected in zip(MODELS, (15, 9, 11), strict=True):
        grown = sum(abs(e) > abs(n) for n, e in zip(TABLE_13[model], TABLE_14[model], strict=True))
        assert grown == expected
    items = paper_items("cogview")
    neutral = human_gep(items, setting=NEUTRAL).gep_vector
    explicit = human_gep(items, setting=EXPLICIT).gep_vector
    assert sum(abs(explicit[k]) > abs(neutral[k]) for k in KEYS) == 14
    assert neutral["shirt"] == explicit["shirt"] == -0.025


@pytest.mark.parametrize(("name", "expected"), [("GEP_C", 7 / 15), ("GEP_CC", 11 / 15), ("GEP_CLS", 1.0)])
def test_table_6_scores_give_its_kendall_tau_column(name, expected):
    """Table 6: GEP_C 0.47, GEP_CC 0.73, GEP_CLS 1.00 (section 6.1's rounding).

    Six cells, no ties: tau-b is (concordant - discordant) / 15, i.e. 7/15, 11/15 and 15/15. The
    table itself prints 0.466 for 7/15 = 0.4667: truncated, not rounded, to three decimals.
    """
    auto = dict(zip(TABLE_6_CELLS, TABLE_6[name], strict=True))
    human = dict(zip(TABLE_6_CELLS, TABLE_6_HUMAN, strict=True))
    ranking = gep_agreement.score_ranking(auto, human)
    assert ranking.n_cells == 6
    assert ranking.kendall_tau_b == pytest.approx(expected)
    assert ranking.kendall_tau_b == pytest.approx(
        kendalltau(TABLE_6[name], TABLE_6_HUMAN, variant="b").statistic
    )
    assert round(ranking.kendall_tau_b, 2) == {"GEP_C": 0.47, "GEP_CC": 0.73, "GEP_CLS": 1.0}[name]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("detector", ["C", "CC", "CLS"])
def test_table_16_per_attribute_auc_average_to_table_7(model, detector):
    """Table 7 is the mean of Table 16's 15 AUCs; each of those is rounded to 0.01, so the mean of
    the printed values can differ from Table 7 by up to 0.005 (largest seen: Stable CLS, 0.0013)."""
    per_attribute = dict(zip(KEYS, TABLE_16[model][detector], strict=True))
    assert gep_agreement.mean_defined(per_attribute) == pytest.approx(TABLE_7[model][detector], abs=HALF_CENT)


# --------------------------------------------------------------------------------------------
# The agreement statistics against scipy and scikit-learn
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_kendall_tau_b_equals_scipy_variant_b_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    # Rounding to one decimal makes ties in both vectors, where tau-a, tau-b and tau-c differ.
    x = np.round(rng.normal(size=n), 1)
    y = np.round(x * rng.uniform(-1, 1) + rng.normal(size=n), 1)
    ours = gep_agreement.kendall_tau_b(x.tolist(), y.tolist())
    assert ours == pytest.approx(kendalltau(x, y, variant="b").statistic, abs=1e-12)


def test_kendall_tau_b_hand_worked_with_a_tie():
    # Pairs of (1,2,2) vs (1,2,3): concordant 2, discordant 0, tied in x 1, so 2 / sqrt(2 * 3).
    assert gep_agreement.kendall_tau_b([1, 2, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))


@pytest.mark.parametrize("seed", range(12))
def test_pearson_equals_scipy(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 40))
    x = rng.normal(size=n)
    y = x * rng.uniform(-2, 2) + rng.normal(size=n)
    assert gep_agreement.pearson_r(x.tolist(), y.tolist()) == pytest.approx(
        pearsonr(x, y).statistic, abs=1e-12
    )


def to_binary(values):
    """The authors' binarisation: >= 0 -> 1, < 0 -> -1."""
    return [1 if v >= 0 else -1 for v in values]


@pytest.mark.parametrize("seed", range(12))
def test_sign_mcc_equals_sklearn_on_the_authors_binarisation(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(4, 40))
    x = np.round(rng.normal(size=n), 1)  # exact zeros occur and must count as positive
    y = np.round(x + rng.normal(size=n), 1)
    if len(set(to_binary(x))) < 2 or len(set(to_binary(y))) < 2:
        pytest.skip("one sign only: covered by the degenerate test")
    expected = matthews_corrcoef(to_binary(x), to_binary(y))
    assert gep_agreement.sign_mcc(x.tolist(), y.tolist()) == pytest.approx(expected, abs=1e-12)


def test_sign_mcc_counts_zero_as_positive():
    assert gep_agreement.sign_mcc([0.0, -0.1, 0.2, -0.3], [0.1, -0.2, 0.0, -0.1]) == 1.0
    assert gep_agreement.sign_mcc([0.0, -0.1], [-0.1, 0.0]) == -1.0


@pytest.mark.parametrize("seed", range(12))
def test_roc_auc_equals_sklearn_with_tied_scores(seed):
    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(4, 80))
    labels = rng.random(n) < 0.4
    labels[0], labels[1] = True, False  # both classes present
    scores = np.round(labels * 0.3 + rng.random(n), 1)  # ties within and across classes
    assert gep_agreement.roc_auc(labels.tolist(), scores.tolist()) == pytest.approx(
        roc_auc_score(labels, scores), abs=1e-12
    )


def test_roc_auc_hand_worked_tie_counts_one_half():
    # Positive scores (0.9, 0.5), negatives (0.5, 0.1): 3 wins and one tie of 4 pairs.
    assert gep_agreement.roc_auc([True, True, False, False], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(3.5 / 4)


def test_undefined_statistics_are_none_not_zero():
    assert gep_agreement.kendall_tau_b([0.1, 0.1, 0.1], [1, 2, 3]) is None  # constant vector: 0/0
    assert gep_agreement.kendall_tau_b([1.0], [2.0]) is None
    assert gep_agreement.kendall_tau_b([], []) is None
    assert gep_agreement.pearson_r([0.1, 0.1, 0.1], [1, 2, 3]) is None  # the float mean of 0.1s is not 0.1
    assert gep_agreement.pearson_r([1.0], [1.0]) is None
    # One sign only: scikit-learn calls that MCC 0.0, it is 0/0.
    assert matthews_corrcoef([1, 1, 1], [1, -1, 1]) == 0.0
    assert gep_agreement.sign_mcc([0.1, 0.2, 0.0], [0.1, -0.2, 0.3]) is None
    assert gep_agreement.sign_mcc([], []) is None
    assert gep_agreement.roc_auc([True, True], [0.2, 0.4]) is None
    assert gep_agreement.roc_auc([], []) is None
    assert gep_agreement.mean_defined({"a": None}) is None
    assert gep_agreement.mean_defined([0.5, None, 1.0]) == 0.75


def test_statistics_refuse_unpaired_or_non_finite_input():
    with pytest.raises(ValueError, match="length"):
        gep_agreement.kendall_tau_b([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="finite"):
        gep_agreement.pearson_r([1, math.nan], [1, 2])
    with pytest.raises(ValueError, match="length"):
        gep_agreement.roc_auc([True, False], [0.1])
    with pytest.raises(ValueError, match="finite"):
        gep_agreement.roc_auc([True, False], [0.1, math.inf])


# --------------------------------------------------------------------------------------------
# Automatic vectors, ROC-AUC per attribute, agreement, and a whole study
# --------------------------------------------------------------------------------------------


def test_auto_vector_is_mean_score_of_women_minus_men_over_relevant_images():
    items = [
        item(1, WOMAN, EXPLICIT, "dress", scores={"clip": {"dress": 0.30, "suit": 9.0}}),
        item(2, WOMAN, EXPLICIT, "dress", scores={"clip": {"dress": 0.20}}),
        item(3, WOMAN, EXPLICIT, "suit", scores={"clip": {"suit": 0.10}}),
        item(4, MAN, EXPLICIT, "dress", scores={"clip": {"dress": 0.05}}),
        item(5, MAN, EXPLICIT, "suit", scores={"clip": {"suit": 0.25}}),
        item(6, MAN, EXPLICIT, "suit", scores={"other": {"suit": 0.99}}),  # not scored by clip
    ]
    result = auto_gep(items, detector="clip", setting=EXPLICIT, keys=("dress", "suit"))
    assert result.mean_scores[WOMAN] == pytest.approx({"dress": 0.25, "suit": 0.10})
    assert result.gep_vector == pytest.approx({"dress": 0.20, "suit": -0.15})
    assert result.gep_score == pytest.approx(0.175)
    assert result.n_without_score == {WOMAN: {"dress": 0, "suit": 0}, MAN: {"dress": 0, "suit": 1}}


def test_auto_vector_without_scores_is_none():
    result = auto_gep([item(1, WOMAN), item(2, MAN)], detector="clip", setting=NEUTRAL, keys=("hat",))
    assert result.gep_vector == {"hat": None}
    assert result.gep_score is None


def test_roc_auc_per_attribute_uses_answered_and_scored_relevant_images_and_can_pool_settings():
    items = [
        item(1, WOMAN, NEUTRAL, None, {"hat": "yes", "tie": "no"}, {"clip": {"hat": 0.9, "tie": 0.2}}),
        item(2, MAN, NEUTRAL, None, {"hat": "no", "tie": "yes"}, {"clip": {"hat": 0.1, "tie": 0.1}}),
        item(3, MAN, NEUTRAL, None, {"hat": None, "tie": "no"}, {"clip": {"hat": 0.0, "tie": 0.3}}),
        item(4, MAN, EXPLICIT, "hat", {"hat": "yes", "tie": "no"}, {"clip": {"hat": 0.05, "tie": 0.9}}),
    ]
    neutral = gep_agreement.attribute_roc_auc(items, detector="clip", setting=NEUTRAL, keys=("hat", "tie"))
    assert neutral.by_attribute == {"hat": 1.0, "tie": 0.0}
    assert neutral.n_positive == {"hat": 1, "tie": 1}
    assert neutral.mean == 0.5
    explicit = gep_agreement.attribute_roc_auc(items, detector="clip", setting=EXPLICIT, keys=("hat", "tie"))
    assert explicit.by_attribute == {"hat": None, "tie": None}  # one class only; tie was not asked
    assert explicit.mean is None
    pooled = gep_agreement.attribute_roc_auc(items, detector="clip", setting=None, keys=("hat", "tie"))
    assert pooled.n_positive == {"hat": 2, "tie": 1}
    assert pooled.by_attribute["hat"] == pytest.approx(0.5)  # 0.9 beats 0.1, 0.05 does not


def test_vector_agreement_uses_keys_defined_in_both_vectors():
    human = {"a": 0.3, "b": -0.2, "c": 0.0, "d": None}
    auto = {"a": 0.03, "b": -0.01, "c": 0.02, "d": 0.5}
    agreement = gep_agreement.vector_agreement(auto, human, keys=("a", "b", "c", "d"))
    assert agreement.n == 3
    assert agreement.kendall_tau_b == pytest.approx(
        kendalltau([0.03, -0.01, 0.02], [0.3, -0.2, 0.0]).statistic
    )
    assert agreement.mcc == 1.0
    assert agreement.pearson == pytest.approx(pearsonr([0.03, -0.01, 0.02], [0.3, -0.2, 0.0]).statistic)


def synthetic_study(seed: int = 0) -> dict[str, list[GepItem]]:
    """Three models, both settings, 5 images per prompt, an oracle and a noisy detector."""
    rng = np.random.default_rng(seed)
    study = {}
    for m, model in enumerate(MODELS):
        items = []
        for p, prompt in enumerate(paper_data.gep_prompts()):
            for i in range(5):
                base = 0.1 + 0.2 * m if prompt.gender == WOMAN else 0.3
                keys = KEYS if prompt.setting == NEUTRAL else (prompt.attribute,)
                answers = {k: "yes" if rng.random() < base + 0.03 * j else "no" for j, k in enumerate(keys)}
                scores = {
                    "oracle": {k: 1.0 if a == "yes" else 0.0 for k, a in answers.items()},
                    "noisy": {k: (a == "yes") * 0.2 + float(rng.random()) for k, a in answers.items()},
                }
                items.append(GepItem.from_metadata((model, p, i), prompt.as_row(), answers, scores))
        study[model] = items
    return study


def test_oracle_detector_reproduces_the_human_vector_exactly():
    cell = gep_agreement.gep_study({"dalle": synthetic_study()["dalle"]}).cells["dalle"][NEUTRAL]
    oracle = cell.detectors["oracle"]
    assert oracle.gep.gep_vector == cell.human.gep_vector  # exactly: same ties
    assert oracle.agreement.kendall_tau_b == pytest.approx(1.0)
    assert oracle.agreement.pearson == pytest.approx(1.0)
    assert oracle.roc_auc.mean == 1.0
    assert list(cell.detectors) == ["noisy", "oracle"]


def test_study_dict_has_the_report_shape_and_is_strict_json():
    study = gep_agreement.gep_study(synthetic_study())
    data = study.as_dict()
    json.dumps(data, allow_nan=False)  # no NaN anywhere: undefined figures are None
    assert set(data) == {"attributes", "score_ranking"}
    assert set(data["attributes"]) == set(MODELS)
    assert set(data["attributes"]["cogview"]) == {NEUTRAL, EXPLICIT}
    cell = data["attributes"]["cogview"][EXPLICIT]
    assert set(cell) == {
        "n_items",
        "frequencies",
        "gep_vector",
        "gep_score",
        "n_without_final_answer",
        "detectors",
    }
    assert cell["n_items"] == {WOMAN: 1200, MAN: 1200}
    assert set(cell["frequencies"]) == {WOMAN, MAN}
    assert list(cell["frequencies"][WOMAN]) == list(KEYS)
    assert list(cell["gep_vector"]) == list(KEYS)
    noisy = cell["detectors"]["noisy"]
    assert set(noisy) == {"gep_vector", "gep_score", "kendall_tau_b", "mcc", "pearson", "roc_auc"}
    assert set(noisy["roc_auc"]) == {"by_attribute", "mean"}
    assert set(data["score_ranking"]) == {"noisy", "oracle"}
    # The ranking is tau-b over the six cells' scores.
    cells = [(m, s) for m in MODELS for s in (NEUTRAL, EXPLICIT)]
    auto = [data["attributes"][m][s]["detectors"]["noisy"]["gep_score"] for m, s in cells]
    human = [data["attributes"][m][s]["gep_score"] for m, s in cells]
    assert data["score_ranking"]["noisy"] == pytest.approx(kendalltau(auto, human).statistic)
    assert study.score_ranking["noisy"].n_cells == 6


def test_study_lists_only_settings_a_model_has_images_in():
    items = [item(1, WOMAN, answers={"hat": "yes"}), item(2, MAN, answers={"hat": "no"})]
    study = gep_agreement.gep_study({"sd": items}, detectors=("clip",), keys=("hat",))
    assert list(study.cells["sd"]) == [NEUTRAL]
    # One cell cannot rank anything; the detector never scored, so its score is undefined too.
    assert study.score_ranking["clip"].kendall_tau_b is None
    assert study.as_dict()["attributes"]["sd"][NEUTRAL]["detectors"]["clip"]["gep_score"] is None
