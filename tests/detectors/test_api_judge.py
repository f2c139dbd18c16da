"""api_judge against a chat-completions server this test starts on 127.0.0.1 — never the internet.

The HTTP exchange is real (httpx to http.server); only the waits between retries are recorded
instead of slept, so the whole file runs in about a second.
"""

from __future__ import annotations

import base64
import io
import logging
import random

import pytest
from PIL import Image

from detectors.base import DetectorOptionError, DetectorUnavailable
from detectors.models import DetectorRun, JudgeResponse, Prediction
from detectors.plugins.api_judge import (
    ApiJudgeDetector,
    JudgeAnswer,
    JudgeQuestion,
    JudgeRequestFailed,
    JudgeResponseData,
    answer_value,
    choice_probabilities,
    judge_answer,
)
from tests.detectors.fake_chat_server import Reply, completion, logprobs, running

KEY = "sk-test-SECRET-4242"
GENDER = JudgeQuestion(
    key="gender", text="What is the gender of the person?", choices=(("male", "Male"), ("female", "Female"))
)
HAT = JudgeQuestion(key="hat", text="Does the person wear a hat?", choices=(("yes", "Yes"), ("no", "No")))


@pytest.fixture(scope="module")
def module_server():
    with running() as fake:
        yield fake


@pytest.fixture
def server(module_server, monkeypatch):
    """The module's server, its script and records emptied, its defaults back; the settings
    point at it with a key."""
    from tests.detectors.fake_chat_server import first_choice

    module_server.script.clear()
    module_server.requests.clear()
    module_server.headers.clear()
    module_server.answer = first_choice
    module_server.models = ["judge-model"]
    module_server.latency = 0.0
    module_server.models_reply = None
    monkeypatch.setenv("BIASLAB_JUDGE_BASE_URL", module_server.base_url)
    monkeypatch.setenv("BIASLAB_JUDGE_API_KEY", KEY)
    return module_server


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps():
    return Sleeps()


def judge(sleeps, **options) -> ApiJudgeDetector:
    options.setdefault("model", "judge-model")
    options.setdefault("max_attempts", 3)
    options.setdefault("timeout", 2)
    detector = ApiJudgeDetector(sleep=sleeps, rng=random.Random(3), **options)
    detector.ensure_loaded()
    return detector


def photo(color=(200, 30, 30), size=(40, 30)) -> Image.Image:
    return Image.new("RGB", size, color)


# --- the strict reading of answers (pure) --------------------------------------------------------
def test_an_answer_is_a_choice_value_or_name_after_trimming_and_case_folding_and_nothing_looser():
    assert answer_value("  MALE \n", GENDER) == "male"
    assert answer_value("female", GENDER) == "female"
    for loose in ("Male.", "male person", "It is male", "m", "", "Mal"):
        assert answer_value(loose, GENDER) is None, loose


def test_probabilities_read_the_first_token_alternatives_that_begin_one_choice_normalised():
    tokens = logprobs(["Ma", "le"], {"Ma": 0.6, "Fem": 0.2, "male": 0.1, "\n": 0.1})["content"]
    probabilities = choice_probabilities("Male", 0, tokens, GENDER)
    assert probabilities == pytest.approx({"male": 0.7 / 0.9, "female": 0.2 / 0.9})
    assert sum(probabilities.values()) == pytest.approx(1.0)


def test_probabilities_under_a_json_schema_start_where_the_answer_starts_inside_its_token():
    content = '{"answer": "Female"}'
    tokens = logprobs(['{"answer":', ' "F', "emale", '"}'], {' "F': 0.8, ' "M': 0.2}, at=1)["content"]
    assert choice_probabilities(content, content.index("Female"), tokens, GENDER) == pytest.approx(
        {"male": 0.2, "female": 0.8}
    )


def test_no_probabilities_when_the_first_token_begins_two_choices_or_the_tokens_spell_something_else():
    both = JudgeQuestion(key="q", text="?", choices=(("a", "Man"), ("b", "Many")))
    tokens = logprobs(["Man", "y"], {"Man": 0.9, "x": 0.1})["content"]
    assert choice_probabilities("Many", 0, tokens, both) is None
    assert choice_probabilities("Male", 0, logprobs(["Fe"])["content"], GENDER) is None


def test_an_unparseable_answer_keeps_its_raw_text_and_no_probabilities():
    answer = judge_answer(
        JudgeResponseData(content="I think male.", mode="none", probabilities={"male": 1.0}), GENDER
    )
    assert answer == JudgeAnswer(value=None, raw="I think male.", probabilities=None)


# --- configuration ------------------------------------------------------------------------------
def test_without_a_base_url_load_names_the_setting(monkeypatch):
    monkeypatch.delenv("BIASLAB_JUDGE_BASE_URL", raising=False)
    with pytest.raises(DetectorUnavailable, match="set BIASLAB_JUDGE_BASE_URL"):
        ApiJudgeDetector(model="m").load()


def test_the_model_is_required_and_bad_options_are_refused_before_any_request():
    with pytest.raises(DetectorOptionError, match="model=NAME"):
        ApiJudgeDetector()
    with pytest.raises(DetectorOptionError, match="constrain"):
        ApiJudgeDetector(model="m", constrain="regex")
    with pytest.raises(DetectorOptionError, match="concurrency"):
        ApiJudgeDetector(model="m", concurrency=0)


def test_a_model_the_server_does_not_serve_is_named_with_those_it_does(server, sleeps):
    with pytest.raises(DetectorUnavailable, match="does not serve model 'other'; it serves: judge-model"):
        judge(sleeps, model="other")


def test_the_prompt_template_and_model_are_part_of_the_version(tmp_path):
    template = tmp_path / "prompt.txt"
    template.write_text("Look closely. {question}\n{choices}")
    plain = ApiJudgeDetector(model="m").version_id
    assert plain.startswith("1+m+t")
    assert ApiJudgeDetector(model="m", prompt_template=str(template)).version_id != plain
    assert ApiJudgeDetector(model="n").version_id != plain
    template.write_text("no placeholder")
    with pytest.raises(DetectorOptionError, match=r"no \{question\}"):
        ApiJudgeDetector(model="m", prompt_template=str(template))


# --- the exchange -------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_request_carries_the_model_the_image_as_a_data_url_and_the_choices(server, sleeps):
    detector = judge(sleeps)
    [result] = detector.answers_for([photo(size=(40, 30))], [[GENDER]])
    assert result == {"gender": JudgeAnswer("male", "Male", pytest.approx({"male": 0.7, "female": 0.3}))}
    [body] = server.requests
    assert body["model"] == "judge-model"
    assert body["temperature"] == 0
    assert body["logprobs"] is True
    assert body["top_logprobs"] == 20
    assert body["guided_choice"] == ["Male", "Female"]
    assert body["structured_outputs"] == {"choice": ["Male", "Female"]}
    image_part, text_part = body["messages"][0]["content"]
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (40, 30)
    assert "What is the gender of the person?" in text_part["text"]
    assert "- Male\n- Female" in text_part["text"]
    assert server.headers[0]["Authorization"] == f"Bearer {KEY}"


@pytest.mark.django_db
def test_an_answer_without_logprobs_has_no_probabilities(server, sleeps):
    server.then(Reply(body=completion("Female")))
    [result] = judge(sleeps).answers_for([photo()], [[GENDER]])
    assert result == {"gender": JudgeAnswer("female", "Female", None)}


@pytest.mark.django_db
def test_an_answer_outside_the_choices_is_kept_raw_never_coerced(server, sleeps):
    server.then(Reply(body=completion("Probably a man")))
    [result] = judge(sleeps).answers_for([photo()], [[GENDER]])
    assert result == {"gender": JudgeAnswer(None, "Probably a man", None)}


@pytest.mark.django_db
def test_429_is_retried_after_at_least_its_retry_after_and_500_with_exponential_backoff(server, sleeps):
    server.then(Reply(429, {"error": "slow down"}, {"Retry-After": "7"}), Reply(500, "oops"))
    detector = judge(sleeps, max_attempts=3, backoff_base=1, backoff_cap=30)
    [result] = detector.answers_for([photo()], [[GENDER]])
    assert result["gender"].value == "male"
    assert len(server.requests) == 3
    assert sleeps[0] >= 7  # the server's Retry-After, longer than the first backoff (0.5 to 1 s)
    assert 1 <= sleeps[1] <= 2  # the second backoff: half of 2 s fixed, half jitter
    assert detector.usage_take()["requests"] == 3


@pytest.mark.django_db
def test_persistent_5xx_fails_the_image_after_max_attempts_and_caches_nothing(server, sleeps):
    server.then(*[Reply(503, "down")] * 3)
    [result] = judge(sleeps, max_attempts=3).answers_for([photo()], [[GENDER]])
    assert isinstance(result, JudgeRequestFailed)
    assert "failed 3 attempts" in str(result)
    assert "HTTP 503" in str(result)
    assert len(server.requests) == 3
    assert len(sleeps) == 2
    assert not JudgeResponse.objects.exists()


@pytest.mark.django_db
def test_a_timeout_and_malformed_json_are_retried(server, sleeps):
    server.then(
        Reply(delay=0.4, body=completion("Male")), Reply(body="{not json"), Reply(body={"choices": []})
    )
    [result] = judge(sleeps, timeout=0.2, max_attempts=4).answers_for([photo()], [[GENDER]])
    assert result["gender"].value == "male"
    assert len(server.requests) == 4
    assert len(sleeps) == 3


@pytest.mark.django_db
def test_malformed_json_to_the_last_attempt_is_a_failure_naming_it(server, sleeps):
    server.then(*[Reply(body="<html>gateway</html>")] * 2)
    [result] = judge(sleeps, max_attempts=2).answers_for([photo()], [[GENDER]])
    assert isinstance(result, JudgeRequestFailed)
    assert "not a chat completion" in str(result)


@pytest.mark.django_db
def test_auto_steps_down_to_a_json_schema_when_guided_choice_is_refused_and_stays_there(server, sleeps):
    server.then(Reply(400, {"error": "Unrecognized request argument: guided_choice"}))
    server.then(Reply(400, {"error": "Unrecognized request argument: guided_choice"}))
    detector = judge(sleeps)
    [first] = detector.answers_for([photo()], [[GENDER]])
    [second] = detector.answers_for([photo(color=(1, 2, 3))], [[GENDER]])
    assert first["gender"] == second["gender"]
    assert first["gender"].value == "male"
    assert first["gender"].probabilities == pytest.approx({"male": 0.7, "female": 0.3})
    # choice+logprobs refused, choice without logprobs refused, then json_schema from there on.
    assert [("guided_choice" in b, "response_format" in b, "logprobs" in b) for b in server.requests] == [
        (True, False, True),
        (True, False, False),
        (False, True, True),
        (False, True, True),
    ]
    assert sleeps == []  # a refusal is no reason to wait


@pytest.mark.django_db
def test_several_questions_of_several_images_go_out_concurrently_once_each(server, sleeps):
    server.latency = 0.05
    detector = judge(sleeps, concurrency=4)
    images = [photo(color=(90 * i, 90 * i, 90 * i)) for i in range(2)]
    results = detector.answers_for(images, [[GENDER, HAT], [HAT]])
    assert [sorted(r) for r in results] == [["gender", "hat"], ["hat"]]
    assert len(server.requests) == 3


@pytest.mark.django_db
def test_a_second_ask_of_the_same_images_and_questions_sends_no_request(server, sleeps):
    images = [photo(color=(60 * i, 0, 0)) for i in range(3)]
    first = judge(sleeps, usd_per_1k_tokens=0.5)
    answers = first.answers_for(images, [[GENDER]] * 3)
    assert len(server.requests) == 3
    assert first.usage_take() == {
        "requests": 3,
        "cache_hits": 0,
        "prompt_tokens": 300,
        "completion_tokens": 6,
        "cost_usd": pytest.approx(306 / 1000 * 0.5),
    }
    second = judge(sleeps, usd_per_1k_tokens=0.5)  # a new process's detector: only the database
    assert second.answers_for(images, [[GENDER]] * 3) == answers
    assert len(server.requests) == 3
    assert second.usage_take() == {
        "requests": 0,
        "cache_hits": 3,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
    }
    assert JudgeResponse.objects.count() == 3


@pytest.mark.django_db
def test_the_key_appears_in_no_error_log_or_stored_text(server, sleeps, caplog):
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    # Refused with logprobs, answered without; then the second image: 500 three times.
    server.then(Reply(400, echo), Reply(body=completion("Male")), *[Reply(500, echo)] * 3)
    detector = judge(sleeps, constrain="none", concurrency=1)
    answered, failed = detector.answers_for([photo(), photo(color=(9, 9, 9))], [[GENDER], [GENDER]])
    assert answered["gender"].value == "male"
    assert isinstance(failed, JudgeRequestFailed)
    [step_down] = [r.getMessage() for r in caplog.records if r.name == "detectors.plugins.api_judge"]
    assert "HTTP 400" in step_down
    assert "HTTP 500" in str(failed)
    for text in (str(failed), step_down):
        assert "Incorrect API key provided: [BIASLAB_JUDGE_API_KEY]" in text
    texts = [str(failed)] + [record.getMessage() for record in caplog.records]
    assert not [text for text in texts if KEY in text]


@pytest.mark.django_db
def test_a_request_refused_for_its_own_reason_fails_alone_and_changes_nothing_for_the_others(server, sleeps):
    server.then(*[Reply(400, {"error": "image too large"})] * 6)
    detector = judge(sleeps, concurrency=1)
    refused, answered = detector.answers_for([photo(), photo(color=(0, 0, 255))], [[GENDER], [GENDER]])
    assert isinstance(refused, JudgeRequestFailed)
    assert "refused the request: HTTP 400" in str(refused)
    assert "image too large" in str(refused)
    assert answered["gender"].probabilities is not None
    # Six steps down for the first image; the second asked as the first was at first.
    flags = [("guided_choice" in b, "response_format" in b, "logprobs" in b) for b in server.requests]
    assert flags[-1] == flags[0] == (True, False, True)
    assert len(flags) == 7


def test_a_key_the_server_refuses_stops_the_run_at_load_naming_the_setting_not_the_key(server, sleeps):
    server.models_reply = Reply(401, {"error": f"bad key {KEY}"})
    with pytest.raises(DetectorUnavailable) as exc:
        judge(sleeps)
    assert "HTTP 401" in str(exc.value)
    assert "BIASLAB_JUDGE_API_KEY" in str(exc.value)
    assert KEY not in str(exc.value)


def test_an_unreachable_server_is_unavailable_naming_the_setting(monkeypatch, sleeps):
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("BIASLAB_JUDGE_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(DetectorUnavailable, match="cannot reach the judge server at BIASLAB_JUDGE_BASE_URL"):
        judge(sleeps)


@pytest.mark.django_db
def test_an_image_s_answers_become_one_answers_output_with_unparseable_ones_filtered_and_raw(server, sleeps):
    from detectors.judges import StudyAsk

    server.then(
        Reply(body=completion("Female", logprobs=logprobs(["Female"], {"Female": 0.75, "Male": 0.25}))),
        Reply(body=completion("a red cap")),
    )
    detector = judge(sleeps, concurrency=1)
    detector.questions_bind(StudyAsk("answers", (GENDER, HAT)))
    [output] = detector.predict([photo()])
    assert output.as_output() == {
        "answers": {"gender": "female"},
        "probabilities": {"gender": {"male": 0.25, "female": 0.75}},
        "filtered": {"hat": "unparseable"},
        "detail": {"raw": {"hat": "a red cap"}},
    }


@pytest.mark.django_db
def test_in_a_gender_study_the_answer_is_a_verdict_and_an_unparseable_one_filtered(server, sleeps):
    from detectors.judges import GENDER_CHOICES, StudyAsk

    gender = GENDER._replace(choices=GENDER_CHOICES)
    server.then(Reply(body=completion("can't tell")), Reply(body=completion("a woman")))
    detector = judge(sleeps, concurrency=1)
    detector.questions_bind(StudyAsk("gender", (gender,)))
    uncertain, unparseable = detector.predict([photo(), photo(color=(0, 0, 255))])
    assert (uncertain.verdict, uncertain.filter_reason) == ("filtered", "uncertain")
    assert (unparseable.verdict, unparseable.filter_reason) == ("filtered", "unparseable")
    assert "a woman" in unparseable.detail


# --- run_detectors, end to end --------------------------------------------------------------------
@pytest.fixture
def judged_study(db, tmp_path):
    """A questions study (age, wealth) of three one-image items; the third asks only age."""
    from tests.factories import ItemFactory
    from tests.protocols.questions.data import define_questions_study

    study, prompt = define_questions_study(tmp_path, slug="judged", labels_per_item=2)
    items = [
        ItemFactory(prompt=prompt, metadata={"skin": skin}, t2i_model="sdxl") for skin in ("light", "dark")
    ]
    items.append(
        ItemFactory(prompt=prompt, metadata={"skin": "light"}, t2i_model="sdxl", question_keys=["age"])
    )
    return study, items


def run_judge(*options: str, batch_size: int = 8) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    args = [a for option in ("model=judge-model", *options) for a in ("--option", option)]
    call_command(
        "run_detectors",
        "--detector",
        "api_judge",
        "--study",
        "judged",
        "--batch-size",
        str(batch_size),
        *args,
        stdout=out,
        stderr=io.StringIO(),
    )
    return out.getvalue()


def every_stored_text() -> list[str]:
    """Every text the database holds of the judge's runs: predictions, runs, cached answers."""
    import json

    texts = [json.dumps(p.output) + p.error + p.version for p in Prediction.objects.all()]
    texts += [run.error + run.version + run.host for run in DetectorRun.objects.all()]
    texts += [f"{r.content} {r.question} {r.model} {r.probabilities}" for r in JudgeResponse.objects.all()]
    return texts


def test_run_detectors_asks_each_image_its_items_questions_and_records_what_the_run_spent(
    server, judged_study
):
    from tests.factories import image_of

    _, items = judged_study
    stdout = run_judge("usd_per_1k_tokens=2")
    assert len(server.requests) == 5  # two images x two questions, the third image age only
    predictions = {p.image_id: p for p in Prediction.objects.filter(detector="api_judge")}
    first, third = predictions[image_of(items[0]).pk], predictions[image_of(items[2]).pk]
    assert first.kind == "answers"
    assert first.output["answers"] == {"age": "young", "wealth": "rich"}
    assert first.output["probabilities"]["wealth"] == pytest.approx({"rich": 0.7, "poor": 0.3, "unsure": 0.0})
    assert third.output["answers"] == {"age": "young"}
    [run] = DetectorRun.objects.all()
    assert (run.requests, run.cache_hits, run.prompt_tokens, run.completion_tokens) == (5, 0, 500, 10)
    assert run.cost_usd == pytest.approx(510 / 1000 * 2)
    assert "5 requests, 0 cache hits, 500 prompt + 10 completion tokens, $1.0200." in stdout


def test_a_run_asking_questions_answered_before_sends_no_request(server, judged_study):
    run_judge()
    Prediction.objects.all().delete()  # as after deleting them, or in a study sharing the questions
    stdout = run_judge()
    assert len(server.requests) == 5
    assert Prediction.objects.filter(status="ok").count() == 3
    newest = DetectorRun.objects.order_by("-pk").first()
    assert (newest.requests, newest.cache_hits, newest.prompt_tokens) == (0, 5, 0)
    assert "0 requests, 5 cache hits" in stdout


def test_a_run_stores_failures_as_failed_unparseable_answers_raw_and_the_key_nowhere(
    server, judged_study, caplog
):
    from tests.factories import image_of

    _, items = judged_study
    caplog.set_level(logging.DEBUG)
    broken = Reply(500, {"error": f"upstream broke; your key {KEY}"})
    # One request at a time, in image order, each image's questions in the study's order.
    server.then(
        Reply(body=completion("Young")),
        Reply(body=completion("Definitely rich")),
        broken,
        broken,  # the second image's age: two attempts, both 500
        Reply(body=completion("Wealthy")),
        Reply(body=completion("Old")),
    )
    stdout = run_judge("concurrency=1", "max_attempts=2", "backoff_base=0", batch_size=1)
    assert len(server.requests) == 6  # the failed image's retry alone sends nothing again
    by_image = {p.image_id: p for p in Prediction.objects.all()}
    first, second, third = (by_image[image_of(item).pk] for item in items)
    assert first.output == {
        "answers": {"age": "young"},
        "filtered": {"wealth": "unparseable"},
        "detail": {"raw": {"wealth": "Definitely rich"}},
    }
    assert second.status == "failed"
    assert second.output == {}
    assert "failed 2 attempts" in second.error
    assert "HTTP 500" in second.error
    assert third.output == {"answers": {"age": "old"}}
    assert "1 failed" in stdout
    texts = every_stored_text() + [r.getMessage() for r in caplog.records] + [stdout]
    assert not [text for text in texts if KEY in text]
    assert "[BIASLAB_JUDGE_API_KEY]" in second.error


def test_api_judge_refuses_an_executor_and_a_study_it_cannot_serve_writing_nothing(server, db):
    from django.core.management import CommandError

    from detectors.executors import ExecutorError
    from detectors.services import detector_run
    from tests.factories import StudyFactory

    study = StudyFactory(protocol="questions", questions=False)
    with pytest.raises(ExecutorError, match="without --executor"):
        detector_run(detector=ApiJudgeDetector(model="judge-model"), study=study, executor=object())  # type: ignore[arg-type]
    pair = StudyFactory(protocol="pair_change")
    from django.core.management import call_command

    with pytest.raises(CommandError, match="cannot answer study"):
        call_command("run_detectors", "--detector", "api_judge", "--study", pair.slug, "--option", "model=m")
    assert not DetectorRun.objects.exists()
    assert server.requests == []
