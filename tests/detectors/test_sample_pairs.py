"""``manage.py sample_pairs``: the stratified draw of pairs for people to check (Wang et al. 2024,
section 4.3), written into the labelling queue and recorded on the study."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from annotate import services
from metrics import pair_change as pc
from protocols.pair_change.sampling import pairs_sample, parse_buckets, study_samples
from studies.models import Image, ImageRole, Item, ItemImage
from tests.factories import ImageFactory, StudyFactory
from tests.reports.pair_change_data import AGE_GENDER, add_pair, build, measure, measure_both, pair_key

pytestmark = pytest.mark.django_db

#: Edits of a 30-year-old man (gray 100) per age verdict: +1.2, -1.12, 0 and +0.6 (no verdict).
EDITS = {
    "older": ("male", 60.0, 100.0),
    "younger": ("male", 2.0, 100.0),
    "unchanged": ("male", 31.0, 100.0),
    "between": ("male", 45.0, 100.0),
}


def pool_study(slug: str = "pool", n: dict[str, int] | None = None):
    """A pair-change study with n[verdict] pairs of each kind (default 6 older, 5 younger,
    10 unchanged, 4 between), all on one seed photo; keys ``<verdict>-<i>``."""
    n = n or {"older": 6, "younger": 5, "unchanged": 10, "between": 4}
    study = StudyFactory(slug=slug, name=slug, protocol="pair_change")
    seed = ImageFactory()
    measure_both(seed, ("male", 30.0, 100.0))
    for verdict, count in n.items():
        for i in range(count):
            item = add_pair(study, "sd15", "profession", f"{verdict}{i}", seed, "S", EDITS[verdict])
            Item.objects.filter(pk=item.pk).update(key=f"{verdict}-{i}")
    return study


def run(**options: object) -> str:
    out = io.StringIO()
    call_command("sample_pairs", stdout=out, stderr=out, **options)
    return out.getvalue()


def queued(study) -> dict[str, tuple[int, list[str]]]:
    return {
        key: (queue, keys)
        for key, queue, keys in Item.objects.filter(study=study, queue__gt=0).values_list(
            "key", "queue", "question_keys"
        )
    }


def test_a_draw_queues_the_asked_pairs_per_bucket_with_the_attribute_question():
    study = pool_study()
    out = run(study="pool", attribute="age", buckets="older=2,younger=2,unchanged=3", seed=7)
    assert (
        "Drew 7 pair(s) for age (older 2, younger 2, unchanged 3) measured by face_age_gender@1, seed 7"
        in out
    )
    assert "from a pool of older 6, younger 5, unchanged 10; 4 pair(s) without a clear verdict" in out
    chosen = queued(study)
    assert len(chosen) == 7
    assert all(value == (1, ["age"]) for value in chosen.values())
    by_bucket = {b: sorted(k for k in chosen if k.startswith(b)) for b in ("older", "younger", "unchanged")}
    assert [len(v) for v in by_bucket.values()] == [2, 2, 3]
    assert not any(k.startswith("between") for k in chosen)
    [record] = study_samples(study.__class__.objects.get(pk=study.pk))
    assert record["attribute"] == "age"
    assert record["seed"] == 7
    assert record["buckets"] == {"older": 2, "younger": 2, "unchanged": 3}
    assert record["source"] == {"detector": AGE_GENDER, "version": "1"}
    assert record["thresholds"] == {"age": 25.0, "skin": 20.0}
    assert {e["item"] for e in record["items"]} == set(chosen)
    assert all(e["verdict"] == e["item"].split("-")[0] == e["bucket"] for e in record["items"])


def test_the_draw_is_the_metrics_stratified_sample_of_the_verdict_buckets():
    study = pool_study()
    draw = pairs_sample(study=study, attribute="age", sizes={"older": 3, "unchanged": 4}, seed=11)
    buckets = {
        key: (key.split("-")[0] if not key.startswith("between") else None)
        for key in Item.objects.filter(study=study).values_list("key", flat=True)
    }
    expected = pc.stratified_sample(buckets, {"older": 3, "unchanged": 4}, 11)
    assert draw.keys == [str(k) for k in expected.ids]  # the order annotators get, shuffled


def test_running_the_same_draw_again_changes_nothing():
    study = pool_study()
    run(study="pool", attribute="age", buckets="older=2,unchanged=2", seed=1)
    before = (queued(study), study.__class__.objects.get(pk=study.pk).parameters)
    out = run(study="pool", attribute="age", buckets="older=2,unchanged=2", seed=1)
    assert "nothing changed" in out
    assert (queued(study), study.__class__.objects.get(pk=study.pk).parameters) == before


def test_another_seed_draws_pairs_not_drawn_before():
    study = pool_study()
    first = pairs_sample(study=study, attribute="age", sizes={"younger": 3}, seed=1)
    second = pairs_sample(study=study, attribute="age", sizes={"younger": 2}, seed=2)
    assert set(first.keys).isdisjoint(second.keys)
    assert len(queued(study)) == 5
    assert len(study_samples(study)) == 2
    with pytest.raises(CommandError, match=r"bucket 'younger' has 0 eligible pair\(s\), 1 requested for age"):
        run(study="pool", attribute="age", buckets="younger=1", seed=3)


def test_a_pair_drawn_for_two_attributes_asks_both_questions():
    fixture = build()
    pairs_sample(study=fixture.study, attribute="age", sizes={"older": 1}, seed=0)
    pairs_sample(study=fixture.study, attribute="skin", sizes={"lighter": 1}, seed=0)
    assert queued(fixture.study) == {pair_key("sd15", "nurse", "S1"): (1, ["age", "skin"])}


def test_gender_buckets_pool_the_two_no_change_combinations():
    fixture = build()
    draw = pairs_sample(
        study=fixture.study,
        attribute="gender",
        sizes={"male_to_female": 1, "female_to_male": 1, "unchanged": 4},
        seed=0,
    )
    assert draw.eligible == {"male_to_female": 1, "female_to_male": 1, "unchanged": 4}
    verdicts = {e["item"]: e["verdict"] for e in draw.record["items"]}
    assert verdicts[pair_key("sd15", "nurse", "S1")] == "male_to_female"
    assert verdicts[pair_key("sd15", "pilot", "S2")] == "female_to_male"
    assert sorted(v for v in verdicts.values() if v not in ("male_to_female", "female_to_male")) == [
        "female_to_female",
        "female_to_female",
        "male_to_male",
        "male_to_male",
    ]
    assert draw.n_without_verdict == 1  # brave/S1: no face in the edit


def test_a_bucket_too_small_is_refused_and_nothing_is_written():
    study = pool_study()
    with pytest.raises(
        CommandError, match=r"bucket 'older' has 6 eligible pair\(s\), 25 requested .*--take-all-if-short"
    ):
        run(study="pool", attribute="age", seed=0)  # the paper's 25 / 25 / 50
    assert queued(study) == {}
    assert study_samples(study.__class__.objects.get(pk=study.pk)) == []


def test_take_all_if_short_takes_the_whole_bucket_and_says_so():
    study = pool_study()
    out = run(study="pool", attribute="age", buckets="younger=8,older=1", seed=0, take_all_if_short=True)
    assert "Took every pair of the buckets that fell short: younger 3 short." in out
    assert sum(1 for key in queued(study) if key.startswith("younger")) == 5
    assert study_samples(study.__class__.objects.get(pk=study.pk))[0]["shortfall"] == {"younger": 3}


def test_dry_run_shows_the_draw_and_writes_nothing():
    study = pool_study()
    out = run(study="pool", attribute="age", buckets="older=2", seed=0, dry_run=True)
    assert "Would draw 2 pair(s) for age (older 2)" in out
    assert queued(study) == {}
    assert study_samples(study.__class__.objects.get(pk=study.pk)) == []


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        (
            "older=2,lighter=1",
            r"bucket 'lighter=1': use name=size with the age buckets older, younger, unchanged",
        ),
        ("older=-1", r"bucket older: size '-1' is not a whole number ≥ 0"),
        ("older=2,older=3", r"bucket older is given twice"),
    ],
)
def test_a_bucket_list_that_does_not_fit_the_attribute_is_refused(buckets, message):
    pool_study()
    with pytest.raises(CommandError, match=message):
        run(study="pool", attribute="age", buckets=buckets)


def test_parse_buckets_defaults_to_the_papers_design():
    assert parse_buckets("skin", "") == {"lighter": 25, "darker": 25, "unchanged": 50}
    assert parse_buckets("gender", "male_to_female=10") == {"male_to_female": 10}


def test_a_study_of_another_protocol_is_refused():
    StudyFactory(slug="gender-study")
    with pytest.raises(
        CommandError, match=r"Study 'gender-study' is a gender study: only pair-change studies draw pairs"
    ):
        run(study="gender-study", attribute="age")
    with pytest.raises(
        CommandError, match=r"No study with slug 'nope' \(existing studies: .*gender-study.*create_study"
    ):
        run(study="nope", attribute="age")


def test_an_attribute_no_detector_measured_yet_is_refused():
    study = StudyFactory(slug="empty", protocol="pair_change")
    seed = ImageFactory()
    add_pair(study, "sd15", "profession", "nurse", seed, "S", None, measured=False)
    with pytest.raises(
        CommandError, match=r"No detector has measured skin on the pairs of study 'empty' yet"
    ):
        run(study="empty", attribute="skin")


def test_two_detectors_measuring_the_attribute_need_a_choice():
    study = pool_study()
    for image_id in set(ItemImage.objects.filter(item__study=study).values_list("image_id", flat=True)):
        measure(Image.objects.get(pk=image_id), "facepp_measure", age=33.0, gender="male")
    with pytest.raises(
        CommandError, match=r"Several detectors measure age in study 'pool': face_age_gender, facepp_measure"
    ):
        run(study="pool", attribute="age", buckets="older=1")
    # facepp says nobody aged: every pair is unchanged by its measurements.
    out = run(study="pool", attribute="age", buckets="unchanged=2", measure="age=facepp_measure")
    assert "measured by facepp_measure@1" in out
    assert "from a pool of unchanged 25" in out


def test_a_bad_pair_stops_the_draw_naming_it_and_nothing_is_written():
    fixture = build()
    ItemImage.objects.filter(
        item=fixture.pairs[pair_key("sd15", "pilot", "S2")], role=ImageRole.INPUT
    ).delete()
    with pytest.raises(CommandError, match=r"pair 'sd15/pilot/S2' has no seed photo"):
        run(study="bp", attribute="age", buckets="older=1")
    assert queued(fixture.study) == {}
    assert study_samples(fixture.study.__class__.objects.get(pk=fixture.study.pk)) == []


def test_a_pair_labelled_without_the_question_is_not_drawn_for_it():
    fixture = build()
    nurse = fixture.pairs[pair_key("sd15", "nurse", "S1")]
    Item.objects.filter(pk=nurse.pk).update(queue=1, question_keys=["gender"], completed_seats=2)
    with pytest.raises(CommandError, match=r"bucket 'older' has 0 eligible"):
        run(study="bp", attribute="age", buckets="older=1")
    draw = pairs_sample(study=fixture.study, attribute="gender", sizes={"male_to_female": 1}, seed=0)
    assert draw.keys == [nurse.key]  # it asks gender already: drawable for gender
    assert Item.objects.get(pk=nurse.pk).question_keys == ["gender"]


def test_only_drawn_pairs_are_handed_to_annotators_and_they_ask_the_drawn_question(annotator_a):
    fixture = build()
    fixture.study.annotators.add(annotator_a)
    assert services.assignment_queue(study=fixture.study, annotator=annotator_a) == []
    pairs_sample(study=fixture.study, attribute="skin", sizes={"lighter": 1, "darker": 1}, seed=0)
    seats = services.assignment_queue(study=fixture.study, annotator=annotator_a, size=5)
    assert sorted(seat.item.key for seat in seats) == [
        pair_key("sd15", "nurse", "S1"),
        pair_key("sd15", "pilot", "S2"),
    ]
    assert {tuple(seat.item.question_keys) for seat in seats} == {("skin",)}
