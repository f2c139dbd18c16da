"""factory_boy factories for the rows every test needs. Images get a real small PNG on disk."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import factory
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from PIL import Image as PILImage

from annotate import roles
from annotate.models import FinalLabel, FinalLabelSource, Image, Label, Prompt, Study
from detectors.models import Prediction, PredictionStatus

PASSWORD = "pass-for-tests-1"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def role(self, create: bool, extracted: str | None, **kwargs: object) -> None:
        if extracted in roles.ROLE_GROUPS:
            self.groups.add(Group.objects.get_or_create(name=extracted)[0])
        elif extracted == "admin":
            self.is_staff = True
            self.is_superuser = True
        if create:
            self.save()


class StudyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Study

    name = factory.Sequence(lambda n: f"Study {n}")
    slug = factory.Sequence(lambda n: f"study-{n}")


class PromptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Prompt

    study = factory.SubFactory(StudyFactory)
    category = "profession"
    word = factory.Sequence(lambda n: f"job{n}")
    text = factory.LazyAttribute(lambda p: f"a photo of one real person who is a {p.word}")


def png_bytes(seed: int, size: int = 32) -> bytes:
    """A small PNG whose bytes differ per seed, so content hashes never collide."""
    img = PILImage.new("RGB", (size, size), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256))
    img.putpixel((0, 0), (seed % 256, (seed // 256) % 256, (seed // 65536) % 256))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _store(data: bytes) -> tuple[str, str]:
    digest = hashlib.sha256(data).hexdigest()
    name = f"images/{digest[:2]}/{digest}.png"
    path = Path(settings.MEDIA_ROOT) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest, name


class ImageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Image
        exclude = ("_stored",)

    prompt = factory.SubFactory(PromptFactory)
    study = factory.SelfAttribute("prompt.study")
    t2i_model = "sdxl"
    source_path = factory.Sequence(lambda n: f"sdxl/img_{n:05d}.png")
    _stored = factory.Sequence(lambda n: _store(png_bytes(n)))
    sha256 = factory.LazyAttribute(lambda o: o._stored[0])
    file = factory.LazyAttribute(lambda o: o._stored[1])
    width = 32
    height = 32
    format = "PNG"
    seed = factory.Sequence(lambda n: 1000 + n)
    index = 0


class LabelFactory(factory.django.DjangoModelFactory):
    """A bare label row. Tests of behaviour should go through annotate.services instead."""

    class Meta:
        model = Label

    image = factory.SubFactory(ImageFactory)
    annotator = factory.SubFactory(UserFactory, role=roles.ANNOTATOR)
    value = "male"


class FinalLabelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = FinalLabel

    image = factory.SubFactory(ImageFactory)
    value = "male"
    source = FinalLabelSource.IMPORTED
    decided_at = factory.LazyFunction(timezone.now)


class PredictionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Prediction

    image = factory.SubFactory(ImageFactory)
    detector = "fake"
    version = "1"
    status = PredictionStatus.OK
    verdict = "male"
