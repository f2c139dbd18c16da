"""The judges' plumbing: the extended answers kind (both shapes, probabilities), what a judge asks in
a study (questions, attributes, gender; refused for others), the gender mapping, and a judge run
through ``run_detectors`` asking each image the questions its items ask."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command

from detectors.judges import CANT_TELL, GENDER_CHOICES, JudgeQuestion, StudyAsk, StudyAskError, judge_output
from detectors.judges.questions import image_question_keys, study_ask
from detectors.kinds import (
    OutputInvalid,
    answers_of,
    filtered_of,
    output_fits_questions,
    output_validate,
    probabilities_of,
)
from detectors.models import DetectorRun, Prediction
from detectors.services import detector_run
from tests.factories import ItemFactory, PromptFactory, StudyFactory, image_of
from tests.fakes import FakeJudge, registered


@pytest.fixture
def fake_judge() -> Iterator[type[FakeJudge]]:
    FakeJudge.calls = []
    with registered(FakeJudge):
        yield FakeJudge


# --- the answers kind -------------------------------------------------------------------------------
def test_a_plain_answers_output_is_still_valid_and_stored_in_the_extended_shape():
    assert output_validate("answers", {"age": "young"}) == {"answers": {"age": "young"}}
    extended = {
        "answers": {"age": "old"},
        "probabilities": {"age": {"young": 0.25, "old": 0.75}},
        "detail": {"loglik": {"age": {"young": -2.0, "old": -0.9}}},
    }
    assert output_validate("answers", extended) == extended
    for output in ({"age": "young"}, extended):
        assert answers_of(output) == answers_of(output_validate("answers", output))
    assert probabilities_of({"age": "young"}) == {}
    assert probabilities_of(extended) == {"age": {"young": 0.25, "old": 0.75}}
    assert answers_of({"answers": "x"}) == {"answers": "x"}  # a question named "answers": plain


@pytest.mark.parametrize(
    ("output", "field"),
    [
        (
            {"answers": {"age": "old"}, "probabilities": {"age": {"young": 0.3, "old": 0.6}}},
            "probabilities.age",
        ),
        (
            {"answers": {"age": "old"}, "probabilities": {"age": {"young": -0.1, "old": 1.1}}},
            "probabilities.age.young",
        ),
        (
            {"answers": {"age": "old"}, "probabilities": {"age": {"old": float("nan")}}},
            "probabilities.age.old",
        ),
        ({"answers": {"age": "old"}, "probabilities": {"mood": {"happy": 1.0}}}, "probabilities.mood"),
        ({"answers": {"age": "old"}, "probabilities": {"age": {}}}, "probabilities.age"),
        ({"answers": {"age": ""}}, "answers.age"),
        ({"answers": {}}, "answers"),
        ({"answers": {"age": "old"}, "filtered": {"age": "unparseable"}}, "filtered.age"),
        ({"answers": {}, "filtered": {"age": "confused"}}, "filtered.age"),
        ({"answers": {"age": "old"}, "scores": {}}, "scores"),
        ({"answers": {"age": "old"}, "detail": "text"}, "detail"),
    ],
)
def test_an_extended_answers_output_that_breaks_a_rule_names_its_field(output, field):
    with pytest.raises(OutputInvalid) as info:
        output_validate("answers", output)
    assert info.value.field == field


def test_probabilities_within_the_tolerance_and_filtered_questions_alone_are_valid():
    stored = output_validate(
        "answers",
        {"answers": {"age": "old"}, "probabilities": {"age": {"young": 0.3, "old": 0.7 + 5e-7}}},
    )
    assert stored["probabilities"]["age"]["old"] == pytest.approx(0.7 + 5e-7)
    only_filtered = output_validate("answers", {"answers": {}, "filtered": {"age": "unparseable"}})
    assert filtered_of(only_filtered) == {"age": "unparseable"}
    assert answers_of(only_filtered) == {}


def test_the_study_check_reads_probabilities_and_filtered_questions_too():
    questions = {"age": ["young", "old"], "mood": ["happy", "sad"]}
    good = {"answers": {"age": "old"}, "probabilities": {"age": {"young": 0.5, "old": 0.5}}}
    output_fits_questions("answers", good, questions)
    output_fits_questions("answers", {"age": "old"}, questions)
    for bad, match in (
        ({"answers": {"age": "old"}, "probabilities": {"age": {"middle": 1.0}}}, "probabilities.age.middle"),
        ({"answers": {}, "filtered": {"height": "unparseable"}}, "filtered.height: unknown question"),
        ({"answers": {"age": "middle"}}, "unknown answer 'middle'"),
    ):
        with pytest.raises(OutputInvalid, match=match):
            output_fits_questions("answers", output_validate("answers", bad), questions)


# --- what a judge asks ------------------------------------------------------------------------------
def test_a_questions_study_asks_its_questions_and_an_item_only_those_it_names(three_questions):
    study, every, two = three_questions
    ask = study_ask(study, judge="j")
    assert ask.kind == "answers"
    assert [q.key for q in ask.questions] == ["age", "wealth", "mood"]
    assert ask.questions[1] == JudgeQuestion(
        "wealth",
        "Is the person wealthy?",
        (("rich", "Wealthy"), ("poor", "Not wealthy"), ("unsure", "Can't tell")),
    )
    keys = image_question_keys(study, [image_of(every).pk, image_of(two).pk])
    assert keys == {image_of(every).pk: (), image_of(two).pk: ("age", "mood")}
    assert [q.key for q in ask.for_keys(keys[image_of(two).pk])] == ["age", "mood"]
    assert ask.for_keys(()) == ask.questions


def test_an_attributes_study_asks_its_fifteen_yes_no_questions(db):
    ask = study_ask(StudyFactory(protocol="attributes"), judge="j")
    assert ask.kind == "answers"
    assert len(ask.questions) == 15
    assert all(q.choices == (("yes", "Yes"), ("no", "No")) for q in ask.questions)


def test_a_gender_study_asks_male_female_or_cant_tell_and_gets_gender_verdicts(db):
    ask = study_ask(StudyFactory(protocol="gender"), judge="j")
    assert ask.kind == "gender"
    assert [(q.key, q.choices) for q in ask.questions] == [("gender", GENDER_CHOICES)]


@pytest.mark.parametrize("protocol", ["pair_change", "objects"])
def test_a_judge_refuses_a_study_whose_detectors_give_other_outputs(db, protocol):
    with pytest.raises(StudyAskError, match=f"j cannot answer study .*protocol {protocol} reads"):
        study_ask(StudyFactory(protocol=protocol), judge="j")


def test_a_judge_refuses_no_study_and_a_study_without_questions(db):
    with pytest.raises(StudyAskError, match="name the study"):
        study_ask(None, judge="j")
    with pytest.raises(StudyAskError, match="no question with choices"):
        study_ask(StudyFactory(protocol="attributes", questions=False), judge="j")


def test_the_question_digest_changes_with_a_reworded_question():
    q = JudgeQuestion("age", "How old?", (("young", "Young"), ("old", "Old")))
    reworded = q._replace(text="How old does the person look?")
    assert StudyAsk("answers", (q,)).digest != StudyAsk("answers", (reworded,)).digest
    assert StudyAsk("answers", (q,)).digest == StudyAsk("answers", (q,)).digest


# --- the gender mapping -----------------------------------------------------------------------------
def test_a_gender_judges_cant_tell_is_filtered_uncertain_with_its_probabilities_as_scores():
    p = {"gender": {"male": 0.2, "female": 0.1, CANT_TELL: 0.7}}
    out = judge_output("gender", p, detail={"loglik": {"gender": {"male": -1.0}}})
    assert out.as_output()["label"] == "filtered"
    assert out.as_output()["reason"] == "uncertain"
    assert out.as_output()["scores"] == {"male": 0.2, "female": 0.1, CANT_TELL: 0.7}
    assert '"loglik"' in out.as_output()["detail"]
    female = judge_output("gender", {"gender": {"male": 0.2, "female": 0.7, CANT_TELL: 0.1}})
    assert female.as_output()["label"] == "female"


# --- a judge's run ----------------------------------------------------------------------------------
def test_a_judge_run_answers_each_image_the_questions_its_item_asks(three_questions, fake_judge):
    study, every, two = three_questions
    outcome = detector_run(detector=FakeJudge(), study=study)
    assert outcome.run is not None
    assert outcome.run.n_done == 2
    assert outcome.version.startswith("1+q")
    by_image = {p.image_id: p for p in Prediction.objects.filter(detector="fake_judge")}
    asked_two = by_image[image_of(two).pk]
    assert asked_two.kind == "answers"
    assert sorted(answers_of(asked_two.output)) == ["age", "mood"]
    assert sorted(answers_of(by_image[image_of(every).pk].output)) == ["age", "mood", "wealth"]
    for prediction in by_image.values():
        for question, ps in probabilities_of(prediction.output).items():
            assert sum(ps.values()) == pytest.approx(1.0)
            assert answers_of(prediction.output)[question] == max(ps, key=ps.__getitem__)


def test_a_judge_on_a_gender_study_stores_gender_verdicts(db, fake_judge):
    study = StudyFactory(protocol="gender")
    ItemFactory(prompt=PromptFactory(study=study))
    detector_run(detector=FakeJudge(), study=study)
    prediction = Prediction.objects.get(detector="fake_judge")
    assert prediction.kind == "gender"
    assert set(prediction.output["scores"]) == {"male", "female", CANT_TELL}


def test_run_detectors_with_a_judge_says_in_one_line_why_it_cannot_run(db, fake_judge):
    pair = StudyFactory(protocol="pair_change", slug="pairs")
    ItemFactory(prompt=PromptFactory(study=pair))
    with pytest.raises(CommandError, match=r"^fake_judge cannot answer study 'pairs'") as info:
        call_command("run_detectors", "--detector", "fake_judge", "--study", "pairs")
    assert "\n" not in str(info.value)
    with pytest.raises(CommandError, match="name the study"):
        call_command("run_detectors", "--detector", "fake_judge")
    assert not DetectorRun.objects.exists()
    assert not Prediction.objects.exists()


def test_run_detectors_with_a_judge_on_a_shard_asks_each_image_its_questions(three_questions, fake_judge):
    _study, _every, _two = three_questions
    call_command("run_detectors", "--detector", "fake_judge", "--study", "three", "--shard", "1/1")
    assert sorted(FakeJudge.calls) == [("age", "mood"), ("age", "wealth", "mood")]


def test_a_workers_judge_gets_each_images_questions_and_the_driver_validates_its_answers(
    three_questions, fake_judge, monkeypatch
):
    """What ``--executor ray`` does, without Ray: the worker is rebuilt from a pickled spec in a
    process where Django's apps are not loaded (a protocol's kind cannot be validated there), gets
    each image with its questions' keys, and the driver validates and stores what comes back."""
    import pickle
    from pathlib import Path

    from django.apps import apps
    from django.conf import settings

    from detectors import services
    from detectors.executors.workers import AskedImage
    from detectors.remote import detector_worker_spec

    study, every, two = three_questions
    judge = FakeJudge()
    judge.questions_bind(study_ask(study, judge=judge.key))
    spec = pickle.loads(pickle.dumps(detector_worker_spec(judge)))
    images = [image_of(every), image_of(two)]
    payloads = [
        AskedImage(str(Path(settings.MEDIA_ROOT) / images[0].file)),
        AskedImage(str(Path(settings.MEDIA_ROOT) / images[1].file), ("age", "mood")),
    ]
    with monkeypatch.context() as patched:
        patched.setattr(apps, "ready", False)
        worker = spec.build()
        assert worker.load()["version"] == judge.version_id
        outcomes = worker.run([i.pk for i in images], [worker.prepare(p) for p in payloads])
    records = [services._record(judge, i.pk, o) for i, o in zip(images, outcomes, strict=True)]
    assert [r.status for r in records] == ["ok", "ok"]
    assert [sorted(answers_of(r.output)) for r in records] == [["age", "mood", "wealth"], ["age", "mood"]]


def test_run_detectors_with_a_judge_on_a_study_without_questions_says_so_in_one_line_writing_nothing(
    db, fake_judge
):
    for protocol, slug in (("questions", "empty"), ("gender", "nogender")):
        ItemFactory(prompt=PromptFactory(study=StudyFactory(protocol=protocol, slug=slug, questions=False)))
    lines = {}
    for slug in ("empty", "nogender"):
        with pytest.raises(CommandError) as info:
            call_command("run_detectors", "--detector", "fake_judge", "--study", slug)
        lines[slug] = str(info.value)
    assert lines == {
        "empty": "study 'empty' has no question with choices for fake_judge to ask.",
        "nogender": "study 'nogender' has no 'gender' question for fake_judge to ask.",
    }
    assert not DetectorRun.objects.exists()
    assert not Prediction.objects.exists()
