"""Face++ (Megvii) Detect API as a gender detector (``facepp``) and a measurement detector
(``facepp_measure``): the paper's "Face++" (appendix A) and BiasPainter's age and gender."""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import json
import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from detectors.base import (
    FEMALE,
    MALE,
    SEVERAL_PEOPLE_RATIO,
    Detector,
    DetectorError,
    DetectorOptionError,
    DetectorOutput,
    DetectorUnavailable,
    face_decision,
)
from detectors.kinds import KIND_MEASUREMENTS
from detectors.plugins.measurements import OVERLAY_OPTIONS, OverlayDetector, faces_picture, measured_output
from detectors.retry import RetriesExhausted, Retryable, retry_after_seconds, with_retries

if TYPE_CHECKING:
    import numpy as np
    from PIL.Image import Image as PILImage

DEFAULT_URL = "https://api-us.faceplusplus.com/facepp/v3/detect"
KEY_ENV = "BIASLAB_FACEPP_KEY"
SECRET_ENV = "BIASLAB_FACEPP_SECRET"
URL_ENV = "BIASLAB_FACEPP_URL"

# Face++ limits for image_base64 / image_file: at most 2 MB and 4096 px a side; at least 48 px.
MAX_SIDE = 4096
MAX_BYTES = 2 * 1024 * 1024

# error_message values (HTTP 400/412/413) that mean "this image cannot be analysed" — a verdict
# about the image. Face++ may append details after a colon (e.g. "INVALID_IMAGE_SIZE: image_file").
IMAGE_ERRORS = (
    "IMAGE_ERROR_UNSUPPORTED_FORMAT",
    "INVALID_IMAGE_SIZE",
    "IMAGE_FILE_TOO_LARGE",
    "INVALID_IMAGE_URL",
    "IMAGE_DOWNLOAD_TIMEOUT",
    "Request Entity Too Large",
)
ANSWER_MEMORY = 256  # answers kept for a batch retried image by image
RETRYABLE_ERRORS = ("CONCURRENCY_LIMIT_EXCEEDED", "INTERNAL_ERROR")


class FacePlusPlusError(DetectorError):
    """The API could not be reached or refused the request for a reason unrelated to the image."""


class FacePlusPlusImageRejected(DetectorError):
    """The API answered that this image cannot be analysed (measurements mode: no output)."""


@dataclass(frozen=True)
class Face:
    """One face as the API returns it; ``gender`` is "" and ``age`` None when the API gave no
    such attribute (it was not asked for, or the face is beyond the five that get attributes)."""

    left: int
    top: int
    width: int
    height: int
    gender: str
    age: float | None = None

    @property
    def area(self) -> int:
        return max(self.width, 0) * max(self.height, 0)


@dataclass(frozen=True)
class ApiImageRejected:
    """The API answered that this image cannot be analysed."""

    message: str


def faces_from_response(payload: Any) -> list[Face]:
    """Parse the ``faces`` list of a Detect response; raises ValueError on an unexpected shape."""
    if not isinstance(payload, dict) or not isinstance(payload.get("faces"), list):
        raise ValueError("response has no 'faces' list")
    faces = []
    for item in payload["faces"]:
        rect = item.get("face_rectangle") or {}
        try:
            left, top, width, height = (int(rect[k]) for k in ("left", "top", "width", "height"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"face without a valid face_rectangle: {item!r}") from exc
        attributes = item.get("attributes") or {}
        gender = (attributes.get("gender") or {}).get("value", "")
        faces.append(Face(left, top, width, height, gender=str(gender), age=_age(attributes.get("age"))))
    return faces


def _age(attribute: Any) -> float | None:
    """The ``age`` attribute's value in years, None when absent; ValueError when not a number."""
    value = attribute.get("value") if isinstance(attribute, dict) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 120:
        raise ValueError(f"age attribute {value!r} is not a number of years between 0 and 120")
    return float(value)


def decide(faces: Sequence[Face], *, several_ratio: float = SEVERAL_PEOPLE_RATIO) -> DetectorOutput:
    """One verdict per image from the faces the API found (rules: docs/reference/detector-rules.md)."""
    decision = face_decision(faces, several_ratio=several_ratio)
    if decision.main is None:
        return DetectorOutput.filtered(decision.reason, scores=decision.scores)
    gender = decision.main.gender.strip().lower()
    if gender in (MALE, FEMALE):
        return DetectorOutput(verdict=gender, scores=decision.scores, detail=decision.main.gender)
    return DetectorOutput.filtered(
        "api_error",
        scores=decision.scores,
        detail=f"no gender attribute for the main face (got {decision.main.gender!r})",
    )


def encode_image(image: PILImage) -> bytes:
    """JPEG bytes within Face++'s size limits (downscaled, then recompressed, as needed)."""
    img = image.convert("RGB")
    if max(img.size) > MAX_SIDE:
        img = img.copy()
        img.thumbnail((MAX_SIDE, MAX_SIDE))
    for quality in (95, 85, 75, 60):
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=quality)
        data = buf.getvalue()
        # base64 grows the payload by a third; the 2 MB limit applies to the decoded file.
        if len(data) <= MAX_BYTES:
            return data
    return data  # still too big: the API answers with IMAGE_FILE_TOO_LARGE → filtered api_error


class FacePlusPlusDetector(Detector):
    key: ClassVar[str] = "facepp"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "Face++ Detect API (gender attribute), largest-face rule."
    option_help: ClassVar[dict[str, str]] = {
        "timeout": "seconds per HTTPS request (default 30)",
        "max_attempts": "tries per image for transient failures, with backoff (default 5)",
        "backoff_base": "first retry delay in seconds, doubled per retry (default 1)",
        "backoff_cap": "longest retry delay in seconds (default 30)",
        "several_ratio": "second-largest face area over the largest's above which an image is "
        "filtered several_people (default 0.5)",
    }
    #: The Detect API's ``return_attributes``.
    return_attributes: ClassVar[str] = "gender"

    def __init__(
        self,
        *,
        device: str = "cpu",
        timeout: float = 30.0,
        max_attempts: int = 5,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        several_ratio: float = SEVERAL_PEOPLE_RATIO,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        **options: Any,
    ) -> None:
        super().__init__(device=device, **options)
        self.timeout = self.number_option("timeout", timeout)
        self.max_attempts = self.number_option("max_attempts", max_attempts, int, minimum=1)
        self.backoff_base = self.number_option("backoff_base", backoff_base)
        self.backoff_cap = self.number_option("backoff_cap", backoff_cap)
        self.several_ratio = self.number_option("several_ratio", several_ratio)
        self.sleep = sleep  # injectable: tests pass a recorder instead of waiting
        self.rng = rng or random.Random()
        self.url = os.environ.get(URL_ENV, "").strip() or DEFAULT_URL
        self._key = ""
        self._secret = ""
        # Answers of the last calls, by JPEG digest: a batch retried image by image after a failure
        # sends (and is billed for) only the images not answered yet.
        self._answers: OrderedDict[str, list[Face] | ApiImageRejected] = OrderedDict()

    @property
    def version_id(self) -> str:
        # The remote model can change without notice; the endpoint is the only id we have. A
        # changed several_ratio changes verdicts, so it makes a new version.
        rule = "" if self.several_ratio == SEVERAL_PEOPLE_RATIO else f"+several{self.several_ratio:g}"
        return f"{self.version}+facepp-v3-detect{rule}"

    def load(self) -> None:
        key = os.environ.get(KEY_ENV, "").strip()
        secret = os.environ.get(SECRET_ENV, "").strip()
        missing = [name for name, value in ((KEY_ENV, key), (SECRET_ENV, secret)) if not value]
        if missing:
            raise DetectorUnavailable(
                f"Face++ is not configured: set {' and '.join(missing)} (and optionally {URL_ENV}, "
                f"default {DEFAULT_URL})."
            )
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise DetectorUnavailable(f"{URL_ENV} must be an http(s) URL, got {self.url!r}.")
        self._key, self._secret = key, secret

    # Image by image (``Detector.predict``) on purpose: a free key allows one request at a time.
    def predict_one(self, image: PILImage) -> DetectorOutput:
        result = self._answer(image)
        if isinstance(result, ApiImageRejected):
            return DetectorOutput.filtered("api_error", detail=result.message)
        return decide(result, several_ratio=self.several_ratio)

    def _answer(self, image: PILImage) -> list[Face] | ApiImageRejected:
        """The API's answer for ``image``, asked once per JPEG (``_answers``)."""
        jpeg = encode_image(image)
        digest = hashlib.sha256(jpeg).hexdigest()
        result = self._answers.get(digest)
        if result is None:
            result = self._answers[digest] = self.detect(jpeg)
            while len(self._answers) > ANSWER_MEMORY:
                self._answers.popitem(last=False)
        return result

    def detect(self, jpeg: bytes) -> list[Face] | ApiImageRejected:
        """Call the API with retries; the faces found, or the API's rejection of the image."""
        body = urllib.parse.urlencode(
            {
                "api_key": self._key,
                "api_secret": self._secret,
                "image_base64": base64.b64encode(jpeg).decode("ascii"),
                "return_attributes": self.return_attributes,
            }
        ).encode("ascii")
        try:
            return with_retries(
                lambda: self._attempt(body),
                max_attempts=self.max_attempts,
                base=self.backoff_base,
                cap=self.backoff_cap,
                rng=self.rng,
                sleep=self.sleep,
                retry_after_cap=self.backoff_cap,
            )
        except RetriesExhausted as exc:
            raise FacePlusPlusError(f"Face++ failed after {self.max_attempts} attempts: {exc}") from None

    def _attempt(self, body: bytes) -> list[Face] | ApiImageRejected:
        request = urllib.request.Request(
            self.url,
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read()
                headers = response.headers
        except urllib.error.HTTPError as exc:
            status, raw, headers = exc.code, exc.read(), exc.headers
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise Retryable(f"cannot reach {self.url}: {reason}") from exc
        return self._interpret(status, raw, headers)

    def _interpret(self, status: int, raw: bytes, headers: Any) -> list[Face] | ApiImageRejected:
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            payload = None
        message = payload.get("error_message", "") if isinstance(payload, dict) else ""
        if status == 200:
            if payload is None:
                raise Retryable(f"HTTP 200 with a body that is not JSON: {raw[:200]!r}")
            try:
                return faces_from_response(payload)
            except ValueError as exc:
                raise FacePlusPlusError(f"unexpected Face++ response: {exc}") from exc
        retry_after = retry_after_seconds(headers)
        if status >= 500 or status == 429 or message.startswith(RETRYABLE_ERRORS):
            raise Retryable(f"HTTP {status} {message or raw[:200]!r}", retry_after)
        if status == 413 or message.startswith(IMAGE_ERRORS):
            return ApiImageRejected(message or f"HTTP {status} (request entity too large)")
        raise FacePlusPlusError(f"Face++ refused the request: HTTP {status} {message or raw[:200]!r}")


class FacePlusPlusMeasureDetector(FacePlusPlusDetector, OverlayDetector):
    """Face++ age and gender of the largest face as ``measurements`` (docs/reference/detector-rules.md)."""

    key: ClassVar[str] = "facepp_measure"
    output_kind: ClassVar[str] = KIND_MEASUREMENTS
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "Face++ Detect API (age and gender attributes) of the largest face."
    option_help: ClassVar[dict[str, str]] = {
        **{name: text for name, text in FacePlusPlusDetector.option_help.items() if name != "several_ratio"},
        **OVERLAY_OPTIONS,
    }
    return_attributes: ClassVar[str] = "gender,age"

    def __init__(self, *, several_ratio: float | None = None, **kwargs: Any) -> None:
        if several_ratio is not None:
            raise DetectorOptionError(
                "facepp_measure measures the largest face and records n_faces; it takes no several_ratio."
            )
        super().__init__(**kwargs)

    @property
    def version_id(self) -> str:
        return f"{self.version}+facepp-v3-detect-gender-age"

    def predict_one(self, image: PILImage) -> DetectorOutput:
        faces = self._answer(image)
        if isinstance(faces, ApiImageRejected):
            # Not measurable, and not a measurement either: a failed prediction with the reason.
            raise FacePlusPlusImageRejected(f"Face++ cannot analyse this image: {faces.message}")
        if not faces:
            return measured_output(face=False, n_faces=0)
        ranked = sorted(faces, key=lambda f: f.area, reverse=True)
        main = ranked[0]
        gender = main.gender.strip().lower()
        measured_gender = gender if gender in (MALE, FEMALE) else None
        overlay = ""
        if self.write_overlays:
            age = "?" if main.age is None else f"{main.age:g}"
            overlay = self._overlay(self._picture(image, ranked, f"{measured_gender or '?'} {age} y"))
        return measured_output(
            face=True, n_faces=len(ranked), age=main.age, gender=measured_gender, overlay=overlay
        )

    def _picture(self, image: PILImage, faces: Sequence[Face], label: str) -> np.ndarray:
        import numpy as np

        # Boxes are in the pixels of the JPEG sent, which encode_image shrank past MAX_SIDE.
        scale = max(image.size) / MAX_SIDE if max(image.size) > MAX_SIDE else 1.0
        boxes = [
            (
                round(f.left * scale),
                round(f.top * scale),
                round((f.left + f.width) * scale),
                round((f.top + f.height) * scale),
            )
            for f in faces
        ]
        return faces_picture(np.asarray(image.convert("RGB")), boxes, label)
