"""Face++ detector against a scripted local server (127.0.0.1) — never the internet."""

from __future__ import annotations

import base64
import io
import random
import socket
from pathlib import Path

import pytest
from PIL import Image

from detectors import registry
from detectors.base import DetectorUnavailable
from detectors.plugins import facepp
from detectors.plugins.facepp import Face, FacePlusPlusDetector, FacePlusPlusError, decide
from detectors.retry import backoff_delay
from tests.detectors.fake_facepp_server import Reply, detect_body, error_body, face, running


@pytest.fixture
def server():
    with running() as fake:
        yield fake


@pytest.fixture
def configured(monkeypatch, server):
    monkeypatch.setenv("BIASLAB_FACEPP_KEY", "k-123")
    monkeypatch.setenv("BIASLAB_FACEPP_SECRET", "s-456")
    monkeypatch.setenv("BIASLAB_FACEPP_URL", server.url)
    return server


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps():
    return SleepRecorder()


def make(sleeps, **kw) -> FacePlusPlusDetector:
    kw.setdefault("max_attempts", 4)
    det = FacePlusPlusDetector(sleep=sleeps, rng=random.Random(7), timeout=2.0, **kw)
    det.ensure_loaded()
    return det


def photo(size=(64, 48), color=(120, 80, 60)) -> Image.Image:
    return Image.new("RGB", size, color)


# --- configuration ---------------------------------------------------------------------------


def test_registry_resolves_facepp_to_this_detector():
    assert registry.detector_class("facepp") is FacePlusPlusDetector


def test_without_key_and_secret_load_says_which_settings_to_fill(monkeypatch):
    monkeypatch.delenv("BIASLAB_FACEPP_KEY", raising=False)
    monkeypatch.delenv("BIASLAB_FACEPP_SECRET", raising=False)
    with pytest.raises(
        DetectorUnavailable, match="not configured: set BIASLAB_FACEPP_KEY and BIASLAB_FACEPP_SECRET"
    ):
        FacePlusPlusDetector().load()


def test_with_only_a_key_load_names_the_missing_secret(monkeypatch):
    monkeypatch.setenv("BIASLAB_FACEPP_KEY", "k")
    monkeypatch.delenv("BIASLAB_FACEPP_SECRET", raising=False)
    with pytest.raises(DetectorUnavailable) as exc:
        FacePlusPlusDetector().load()
    assert "BIASLAB_FACEPP_SECRET" in str(exc.value)
    assert "BIASLAB_FACEPP_KEY " not in str(exc.value)


def test_default_endpoint_is_the_official_detect_url(monkeypatch):
    monkeypatch.delenv("BIASLAB_FACEPP_URL", raising=False)
    assert FacePlusPlusDetector().url == "https://api-us.faceplusplus.com/facepp/v3/detect"


def test_version_id_names_the_api_version():
    assert FacePlusPlusDetector().version_id == "1+facepp-v3-detect"


def test_a_changed_several_people_ratio_makes_a_new_version():
    assert FacePlusPlusDetector(several_ratio=0.7).version_id == "1+facepp-v3-detect+several0.7"


# --- what is sent ----------------------------------------------------------------------------


def test_request_carries_key_secret_gender_attribute_and_the_image_as_jpeg(configured, sleeps):
    configured.then(Reply(body=detect_body(face(10, 10, 40, 40, "Female"))))
    out = make(sleeps).predict([photo((64, 48))])
    assert out[0].verdict == "female"
    sent = configured.requests[0]
    assert sent["api_key"] == "k-123"
    assert sent["api_secret"] == "s-456"
    assert sent["return_attributes"] == "gender"
    decoded = Image.open(io.BytesIO(base64.b64decode(sent["image_base64"])))
    assert decoded.format == "JPEG"
    assert decoded.size == (64, 48)


def test_images_larger_than_the_api_limit_are_downscaled_before_upload():
    data = facepp.encode_image(Image.new("RGB", (5000, 20)))
    assert max(Image.open(io.BytesIO(data)).size) == facepp.MAX_SIDE


# --- decisions -------------------------------------------------------------------------------


def test_one_male_face_is_male(configured, sleeps):
    configured.then(Reply(body=detect_body(face(5, 5, 30, 30, "Male"))))
    out = make(sleeps).predict([photo()])[0]
    assert out.verdict == "male"
    assert out.scores["n_faces"] == 1.0


def test_no_face_is_filtered_as_no_face(configured, sleeps):
    configured.then(Reply(body=detect_body()))
    out = make(sleeps).predict([photo()])[0]
    assert (out.verdict, out.filter_reason) == ("filtered", "no_face")


def test_two_faces_of_similar_size_are_filtered_as_several_people(configured, sleeps):
    configured.then(Reply(body=detect_body(face(0, 0, 40, 40, "Male"), face(50, 0, 36, 36, "Female"))))
    out = make(sleeps).predict([photo()])[0]
    assert (out.verdict, out.filter_reason) == ("filtered", "several_people")
    assert out.scores["second_face_ratio"] == pytest.approx(36 * 36 / (40 * 40), abs=1e-4)


def test_a_small_background_face_leaves_the_decision_to_the_largest_face(configured, sleeps):
    # Listed first but small: order in the response must not matter, area does.
    configured.then(Reply(body=detect_body(face(0, 0, 10, 10, "Male"), face(20, 0, 40, 40, "Female"))))
    out = make(sleeps).predict([photo()])[0]
    assert out.verdict == "female"


def test_main_face_without_gender_attribute_is_filtered_as_api_error():
    out = decide([Face(0, 0, 40, 40, gender="")])
    assert (out.verdict, out.filter_reason) == ("filtered", "api_error")


def test_second_face_exactly_at_half_the_area_still_lets_the_largest_decide():
    out = decide([Face(0, 0, 20, 10, "Male"), Face(0, 0, 10, 10, "Female")])
    assert out.verdict == "male"


def test_a_batch_gets_one_output_per_image_in_order(configured, sleeps):
    configured.then(
        Reply(body=detect_body(face(0, 0, 30, 30, "Male"))),
        Reply(body=detect_body()),
        Reply(body=detect_body(face(0, 0, 30, 30, "Female"))),
    )
    outs = make(sleeps).predict(
        [photo(color=(1, 2, 3)), photo(color=(90, 90, 90)), photo(color=(200, 10, 10))]
    )
    assert [o.verdict for o in outs] == ["male", "filtered", "female"]


# --- API errors ------------------------------------------------------------------------------


def test_an_image_the_api_rejects_is_filtered_as_api_error_with_its_message(configured, sleeps):
    configured.then(Reply(status=400, body=error_body("INVALID_IMAGE_SIZE: image_base64")))
    out = make(sleeps).predict([photo()])[0]
    assert (out.verdict, out.filter_reason) == ("filtered", "api_error")
    assert out.detail == "INVALID_IMAGE_SIZE: image_base64"
    assert len(configured.requests) == 1
    assert sleeps.calls == []


def test_429_then_success_retries_after_a_backoff(configured, sleeps):
    configured.then(
        Reply(status=429, body=error_body("TOO_MANY_REQUESTS")), Reply(body=detect_body(face(0, 0, 9, 9)))
    )
    out = make(sleeps, backoff_base=1.0).predict([photo()])[0]
    assert out.verdict == "male"
    assert len(configured.requests) == 2
    assert len(sleeps.calls) == 1
    assert 0.5 <= sleeps.calls[0] <= 1.0


def test_concurrency_limit_exceeded_is_retried(configured, sleeps):
    configured.then(
        Reply(status=403, body=error_body("CONCURRENCY_LIMIT_EXCEEDED")),
        Reply(status=403, body=error_body("CONCURRENCY_LIMIT_EXCEEDED")),
        Reply(body=detect_body(face(0, 0, 9, 9, "Female"))),
    )
    out = make(sleeps).predict([photo()])[0]
    assert out.verdict == "female"
    assert len(sleeps.calls) == 2


def test_persistent_server_errors_raise_after_bounded_exponential_retries(configured, sleeps):
    configured.default = Reply(status=502, body="<html>bad gateway</html>")
    with pytest.raises(FacePlusPlusError, match=r"after 4 attempts.*HTTP 502"):
        make(sleeps, max_attempts=4, backoff_base=1.0, backoff_cap=3.0).predict([photo()])
    assert len(configured.requests) == 4
    # Steps 1, 2, then capped at 3 — each delay in [step/2, step].
    for delay, step in zip(sleeps.calls, [1.0, 2.0, 3.0], strict=True):
        assert step / 2 <= delay <= step


def test_retry_after_header_is_honoured_up_to_the_cap(configured, sleeps):
    configured.then(Reply(status=503, body=error_body("INTERNAL_ERROR"), headers={"Retry-After": "7"}))
    configured.then(Reply(body=detect_body(face(0, 0, 9, 9))))
    make(sleeps, backoff_base=0.1, backoff_cap=30.0).predict([photo()])
    assert sleeps.calls == [7.0]


def test_malformed_json_is_retried_then_succeeds(configured, sleeps):
    configured.then(Reply(body="{not json"), Reply(body=detect_body(face(0, 0, 9, 9, "Female"))))
    assert make(sleeps).predict([photo()])[0].verdict == "female"


def test_persistent_malformed_json_raises_instead_of_giving_a_verdict(configured, sleeps):
    configured.default = Reply(body="{not json")
    with pytest.raises(FacePlusPlusError, match="not JSON"):
        make(sleeps, max_attempts=2).predict([photo()])


def test_a_json_body_without_faces_raises(configured, sleeps):
    configured.then(Reply(body={"request_id": "x"}))
    with pytest.raises(FacePlusPlusError, match="no 'faces' list"):
        make(sleeps).predict([photo()])


def test_authentication_error_raises_at_once_without_retrying(configured, sleeps):
    configured.then(Reply(status=401, body=error_body("AUTHENTICATION_ERROR")))
    with pytest.raises(FacePlusPlusError, match="AUTHENTICATION_ERROR"):
        make(sleeps).predict([photo()])
    assert len(configured.requests) == 1
    assert sleeps.calls == []


def test_a_slow_server_times_out_and_the_retry_succeeds(configured, sleeps):
    configured.then(
        Reply(body=detect_body(face(0, 0, 9, 9)), delay=1.0), Reply(body=detect_body(face(0, 0, 9, 9)))
    )
    det = make(sleeps)
    det.timeout = 0.2
    assert det.predict([photo()])[0].verdict == "male"
    assert len(sleeps.calls) == 1


def test_an_unreachable_endpoint_raises_after_the_retries(monkeypatch, sleeps):
    with socket.socket() as s:  # a port that was free a moment ago: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("BIASLAB_FACEPP_KEY", "k")
    monkeypatch.setenv("BIASLAB_FACEPP_SECRET", "s")
    monkeypatch.setenv("BIASLAB_FACEPP_URL", f"http://127.0.0.1:{port}/facepp/v3/detect")
    with pytest.raises(FacePlusPlusError, match="cannot reach"):
        make(sleeps, max_attempts=3).predict([photo()])
    assert len(sleeps.calls) == 2


def test_backoff_grows_exponentially_and_stays_under_the_cap():
    rng = random.Random(1)
    for attempt in range(1, 12):
        step = min(10.0, 0.5 * 2 ** (attempt - 1))
        delay = backoff_delay(attempt, base=0.5, cap=10.0, rng=rng)
        assert step / 2 <= delay <= step


# --- with run_detectors ----------------------------------------------------------------------


def test_answers_already_received_are_not_requested_again_when_a_batch_is_retried(configured, sleeps):
    configured.then(Reply(body=detect_body(face(0, 0, 9, 9, "Female"))))
    configured.default = Reply(status=500, body=error_body("INTERNAL_ERROR"))
    det = make(sleeps, max_attempts=2)
    first, second = photo(color=(10, 10, 10)), photo(color=(240, 240, 240))
    with pytest.raises(FacePlusPlusError):
        det.predict([first, second])
    assert len(configured.requests) == 3  # first once, second twice
    assert det.predict([first])[0].verdict == "female"
    assert len(configured.requests) == 3


def test_run_detectors_stores_api_trouble_as_a_failure_and_the_rest_as_verdicts(configured, sleeps, study):
    from detectors.models import Prediction, PredictionStatus
    from detectors.services import detector_run
    from tests.factories import ItemFactory, PromptFactory, image_of

    prompt = PromptFactory(study=study)
    ok_image, failing_image = (image_of(ItemFactory(prompt=prompt)) for _ in range(2))
    configured.then(Reply(body=detect_body(face(0, 0, 9, 9, "Male"))))
    configured.default = Reply(status=503, body=error_body("INTERNAL_ERROR"))

    outcome = detector_run(detector=make(sleeps, max_attempts=2), study=study, batch_size=8)

    assert (outcome.run.n_done, outcome.run.n_failed) == (1, 1)
    ok = Prediction.objects.get(image=ok_image)
    assert (ok.status, ok.verdict) == (PredictionStatus.OK, "male")
    failed = Prediction.objects.get(image=failing_image)
    assert failed.status == PredictionStatus.FAILED
    assert failed.verdict == ""
    assert "Face++ failed after 2 attempts" in failed.error


# --- facepp_measure: age and gender as measurements (BiasPainter) -----------------------------------


def aged(item: dict, age: float | None) -> dict:
    """A face entry of the fake server with an age attribute added."""
    item.setdefault("attributes", {})["age"] = {"value": age}
    return item


def measurer(sleeps, **kw) -> facepp.FacePlusPlusMeasureDetector:
    det = facepp.FacePlusPlusMeasureDetector(
        sleep=sleeps, rng=random.Random(7), timeout=2.0, max_attempts=2, **kw
    )
    det.ensure_loaded()
    return det


def test_registry_resolves_facepp_measure_to_the_measurements_client():
    cls = registry.detector_class("facepp_measure")
    assert cls is facepp.FacePlusPlusMeasureDetector
    assert cls.output_kind == "measurements"
    assert cls(sleep=SleepRecorder()).version_id == "1+facepp-v3-detect-gender-age"


def test_measure_asks_the_api_for_age_and_gender(configured, sleeps):
    configured.then(Reply(body=detect_body(aged(face(5, 5, 30, 30, "Female"), 35))))
    data = measurer(sleeps).predict([photo()])[0].as_output()
    assert configured.requests[0]["return_attributes"] == "gender,age"
    assert (data["face"], data["age"], data["gender"], data["skin_gray"], data["n_faces"]) == (
        True,
        35.0,
        "female",
        None,
        1,
    )


def test_the_largest_face_is_measured_even_beside_a_face_of_similar_size(configured, sleeps, settings):
    configured.then(
        Reply(
            body=detect_body(aged(face(0, 0, 20, 20, "Male"), 61), aged(face(30, 10, 22, 22, "Female"), 24))
        )
    )
    data = measurer(sleeps).predict([photo((64, 48))])[0].as_output()
    # No several-people filter here: the paper measures the person of the photo, n_faces says more.
    assert (data["age"], data["gender"], data["n_faces"]) == (24.0, "female", 2)
    overlay = Path(settings.MEDIA_ROOT) / data["overlay"]
    assert data["overlay"].startswith("overlays/facepp_measure/")
    assert Image.open(overlay).format == "PNG"


def test_no_face_measures_nothing(configured, sleeps, settings):
    configured.then(Reply(body=detect_body()))
    data = measurer(sleeps).predict([photo()])[0].as_output()
    assert data == {"face": False, "age": None, "gender": None, "skin_gray": None, "n_faces": 0}
    assert not (Path(settings.MEDIA_ROOT) / "overlays").exists()


def test_a_face_without_attributes_has_a_null_age_and_gender(configured, sleeps):
    configured.then(Reply(body=detect_body(face(0, 0, 30, 30, gender=None))))
    data = measurer(sleeps, overlays=False).predict([photo()])[0].as_output()
    assert (data["face"], data["age"], data["gender"], data["n_faces"]) == (True, None, None, 1)
    assert "overlay" not in data


def test_an_age_outside_the_human_range_is_an_unexpected_response(configured, sleeps):
    configured.then(Reply(body=detect_body(aged(face(0, 0, 30, 30, "Male"), 300))))
    with pytest.raises(FacePlusPlusError, match="unexpected Face\\+\\+ response: age attribute 300"):
        measurer(sleeps).predict([photo()])


def test_measure_takes_no_several_people_ratio():
    from detectors.base import DetectorOptionError

    with pytest.raises(DetectorOptionError, match="takes no several_ratio"):
        facepp.FacePlusPlusMeasureDetector(several_ratio=0.3)
    assert "several_ratio" not in facepp.FacePlusPlusMeasureDetector.option_help
    assert "overlays" in facepp.FacePlusPlusMeasureDetector.option_help


def test_an_image_the_api_rejects_is_a_failed_measurement_not_a_guess(configured, sleeps, study):
    from detectors.models import Prediction, PredictionStatus
    from detectors.services import detector_run
    from tests.factories import ItemFactory, PromptFactory, image_of

    prompt = PromptFactory(study=study)
    ok_image, rejected_image = (image_of(ItemFactory(prompt=prompt)) for _ in range(2))
    configured.then(
        Reply(body=detect_body(aged(face(0, 0, 9, 9, "Male"), 40))),
        Reply(status=400, body=error_body("INVALID_IMAGE_SIZE: image_base64")),
    )
    outcome = detector_run(detector=measurer(sleeps), study=study, batch_size=8)
    assert (outcome.run.n_done, outcome.run.n_failed) == (1, 1)
    ok = Prediction.objects.get(image=ok_image)
    assert (ok.status, ok.kind, ok.output["age"], ok.output["gender"]) == (
        PredictionStatus.OK,
        "measurements",
        40.0,
        "male",
    )
    failed = Prediction.objects.get(image=rejected_image)
    assert failed.status == PredictionStatus.FAILED
    assert "INVALID_IMAGE_SIZE" in failed.error
    assert len(configured.requests) == 2  # the answered image was not sent again
