"""Image files reach only the people who may see their study, and the
browser gets the same upright 8-bit pixels as the detectors."""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from PIL import ExifTags
from PIL import Image as PILImage

from tests.factories import ImageFactory, ItemFactory, PromptFactory, StudyFactory, image_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_study(annotator_c):
    """A second study, annotated by C only."""
    s = StudyFactory(name="Other study", slug="other")
    s.annotators.add(annotator_c)
    return s


def image_in(study, image=None):
    """The file of a new one-image item of ``study`` (``image``: reuse that file)."""
    return image_of(ItemFactory(prompt=PromptFactory(study=study), image=image))


@pytest.fixture
def gender_image(study):
    return image_in(study)


@pytest.fixture
def other_image(other_study):
    return image_in(other_study)


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def url(image) -> str:
    return image.url  # MEDIA_URL is absolute ("/media/") once settings are loaded


# Who may fetch an image of the gender study (A, B annotate it) and of the other one (C does).
VISIBLE = {
    "annotator_a": {"gender"},
    "annotator_b": {"gender"},
    "annotator_c": {"other"},
    "researcher": {"gender", "other"},
    "admin_user": {"gender", "other"},
    "outsider": set(),
}


@pytest.mark.parametrize("persona", sorted(VISIBLE))
def test_each_persona_gets_exactly_the_images_of_the_studies_they_may_see(
    persona, request, client_for, gender_image, other_image
):
    client = client_for(request.getfixturevalue(persona))
    for slug, image in (("gender", gender_image), ("other", other_image)):
        response = client.get(url(image))
        if slug in VISIBLE[persona]:
            assert response.status_code == 200, (persona, slug)
            assert body(response) == (Path(settings.MEDIA_ROOT) / image.file).read_bytes()
        else:
            assert response.status_code == 404, (persona, slug)


@pytest.mark.parametrize("persona", ["annotator_a", "annotator_b", "outsider"])
@pytest.mark.parametrize("method", ["get", "head", "post", "put", "delete"])
def test_the_wrong_persona_gets_404_for_every_verb(persona, method, request, client_for, other_image):
    client = client_for(request.getfixturevalue(persona))
    assert getattr(client, method)(url(other_image)).status_code == 404


def test_a_refused_image_looks_exactly_like_a_missing_one(client_for, annotator_a, other_image):
    client = client_for(annotator_a)
    refused = client.get(url(other_image))
    missing = client.get(settings.MEDIA_URL + "images/00/" + "0" * 64 + ".png")

    def page(response) -> bytes:
        # The error page carries a CSRF token masked afresh for every response: not a tell.
        return re.sub(
            rb'("X-CSRFToken": "|name="csrfmiddlewaretoken" value=")[^"]+"', rb"\1", response.content
        )

    assert (refused.status_code, page(refused)) == (missing.status_code, page(missing))
    assert refused.status_code == 404


def test_anonymous_visitors_are_sent_to_the_login_page(client, gender_image):
    response = client.get(url(gender_image))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_same_bytes_in_two_studies_are_visible_to_the_annotators_of_either(
    client_for, annotator_a, annotator_c, gender_image, other_study
):
    # One file (content hash) used by an item of each study.
    twin = image_in(other_study, gender_image)
    assert twin.file == gender_image.file
    assert client_for(annotator_a).get(url(twin)).status_code == 200
    assert client_for(annotator_c).get(url(gender_image)).status_code == 200


def test_an_annotator_taken_off_a_study_loses_its_images(client_for, annotator_a, study, gender_image):
    client = client_for(annotator_a)
    assert client.get(url(gender_image)).status_code == 200
    study.annotators.remove(annotator_a)
    assert client.get(url(gender_image)).status_code == 404


@pytest.mark.parametrize(
    "path",
    ["images/x.png", "var/secret.txt", "images/ab/../../secret.txt", "images/00/" + "0" * 64 + ".png.bak"],
)
def test_annotators_get_nothing_that_is_not_an_image_of_their_study(client_for, annotator_a, study, path):
    (Path(settings.MEDIA_ROOT) / "var").mkdir()
    (Path(settings.MEDIA_ROOT) / "var" / "secret.txt").write_text("secret")
    assert client_for(annotator_a).get(settings.MEDIA_URL + path).status_code == 404


def test_image_responses_are_private_to_the_browser(client_for, annotator_a, gender_image):
    response = client_for(annotator_a).get(url(gender_image))
    assert "private" in response["Cache-Control"]


# --- what the browser gets ---------------------------------------------------------------


def stored_image(study, img: PILImage.Image, fmt: str, **params):
    """An image of ``study`` whose file holds ``img`` encoded as ``fmt``."""
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **params)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    name = f"images/{digest[:2]}/{digest}.{'jpg' if fmt == 'JPEG' else fmt.lower()}"
    (Path(settings.MEDIA_ROOT) / name).parent.mkdir(parents=True, exist_ok=True)
    (Path(settings.MEDIA_ROOT) / name).write_bytes(data)
    return image_in(
        study, ImageFactory(sha256=digest, file=name, width=img.width, height=img.height, format=fmt)
    )


def test_the_labeling_screen_gets_an_exif_rotated_photo_upright_as_png(client_for, annotator_a, study):
    img = PILImage.new("RGB", (40, 20), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 20, 20))  # left half red
    exif = PILImage.Exif()
    exif[ExifTags.Base.Orientation] = 6
    image = stored_image(study, img, "JPEG", exif=exif, quality=95)
    response = client_for(annotator_a).get(url(image))
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    shown = PILImage.open(io.BytesIO(body(response)))
    assert shown.size == (20, 40)
    assert shown.getexif().get(ExifTags.Base.Orientation) is None  # not turned a second time
    red, green, blue = shown.getpixel((10, 5))
    assert red > 200  # the stored left edge (red) is on top
    assert max(green, blue) < 60


def test_the_browser_gets_a_16_bit_png_as_8_bit_grey_not_white(client_for, annotator_a, study):
    image = stored_image(study, PILImage.fromarray(np.full((8, 8), 30000, dtype=np.uint16)), "PNG")
    shown = PILImage.open(io.BytesIO(body(client_for(annotator_a).get(url(image)))))
    assert (shown.mode, shown.getpixel((3, 3))) == ("RGB", (117, 117, 117))


def test_a_transparent_png_is_shown_on_white_as_the_detectors_see_it(client_for, researcher, study):
    image = stored_image(study, PILImage.new("RGBA", (4, 4), (0, 0, 0, 0)), "PNG")
    shown = PILImage.open(io.BytesIO(body(client_for(researcher).get(url(image)))))
    assert shown.getpixel((0, 0)) == (255, 255, 255)


def test_a_plain_rgb_image_is_served_byte_for_byte(client_for, annotator_a, gender_image):
    response = client_for(annotator_a).get(url(gender_image))
    assert response["Content-Type"] == "image/png"
    assert body(response) == (Path(settings.MEDIA_ROOT) / gender_image.file).read_bytes()
    assert not list(Path(settings.MEDIA_ROOT).rglob("*.normalised.png"))


def test_the_rendition_of_a_refused_image_is_refused_too(client_for, annotator_a, other_study, researcher):
    image = stored_image(other_study, PILImage.new("RGBA", (4, 4), (0, 0, 0, 0)), "PNG")
    assert client_for(researcher).get(url(image)).status_code == 200  # derives the rendition
    rendition = settings.MEDIA_URL + image.file.rsplit(".", 1)[0] + ".normalised.png"
    assert client_for(annotator_a).get(url(image)).status_code == 404
    assert client_for(annotator_a).get(rendition).status_code == 404
