"""Detectors read images through ``studies.imaging.open_rgb``: upright and 8-bit."""

from __future__ import annotations

import io

import numpy as np
import pytest
from django.core.management import call_command
from PIL import ExifTags
from PIL import Image as PILImage

from detectors.models import Prediction
from studies.imports.images import item_image_store
from tests.factories import PromptFactory, image_of
from tests.fakes import registered_fake

pytestmark = pytest.mark.django_db


def store(study, data: bytes, path: str):
    """The file of a new one-image item of ``study`` holding ``data``, stored as imports store it."""
    item, _ = item_image_store(
        study=study, prompt=PromptFactory(study=study), data=data, key=path, t2i_model="sdxl"
    )
    return image_of(item)


def run(detector: str) -> None:
    call_command("run_detectors", "--detector", detector, stdout=io.StringIO(), stderr=io.StringIO())


def test_a_16_bit_png_reaches_the_detector_scaled_not_clipped_to_white(study):
    # 30000 of 65535 is 117 of 255: the fake detector says female (mean 85..170). Clipped to
    # 255 it would say "filtered, low confidence".
    buffer = io.BytesIO()
    PILImage.fromarray(np.full((16, 16), 30000, dtype=np.uint16)).save(buffer, format="PNG")
    image = store(study, buffer.getvalue(), "sixteen.png")
    with registered_fake():
        run("fake")
    prediction = Prediction.objects.get(image=image, detector="fake")
    assert prediction.verdict == "female"
    assert prediction.scores["mean"] == pytest.approx(117)


@pytest.mark.realmodel
def test_face_gender_sees_an_exif_rotated_portrait_upright(study, astronaut):
    # Stored on its side with EXIF orientation 6 ("turn clockwise to view"), the way phones
    # save portraits. Read as stored, the sideways face is classified male (p 0.67); upright it
    # is the astronaut, female (p 0.87).
    exif = PILImage.Exif()
    exif[ExifTags.Base.Orientation] = 6
    buffer = io.BytesIO()
    astronaut.transpose(PILImage.Transpose.ROTATE_90).save(buffer, format="JPEG", quality=95, exif=exif)
    image = store(study, buffer.getvalue(), "portrait.jpg")
    run("face_gender")
    prediction = Prediction.objects.get(image=image, detector="face_gender")
    assert (prediction.status, prediction.verdict) == ("ok", "female")
    assert prediction.scores["p_female"] == pytest.approx(0.87, abs=0.05)
