"""factory_boy factories for the rows every test needs. Image files get a real small PNG on disk.

``ItemFactory`` makes a one-image item of a gender study (its question included), the shape of
most tests; ``PairItemFactory`` a seed/edit pair; ``StudyFactory(protocol=...)`` creates the
protocol's preset questions.
"""

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

from annotate.models import FinalLabel, FinalLabelSource, Label
from detectors.kinds import KIND_GENDER
from detectors.models import Prediction, PredictionStatus
from studies import permissions
from studies.models import Image, ImageRole, Item, ItemImage, Prompt, Question, Study
from studies.protocols import protocol_spec

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
        if extracted in permissions.ROLE_GROUPS:
            self.groups.add(Group.objects.get_or_create(name=extracted)[0])
        elif extracted == "admin":
            self.is_staff = True
            self.is_superuser = True
        if create:
            self.save()


class StudyFactory(factory.django.DjangoModelFactory):
    """A study with its protocol's preset questions (gender unless ``protocol=`` says otherwise)."""

    class Meta:
        model = Study
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"Study {n}")
    slug = factory.Sequence(lambda n: f"study-{n}")
    protocol = "gender"
    labels_per_item = factory.LazyAttribute(lambda s: protocol_spec(s.protocol).labels_per_item)
    agreement = factory.LazyAttribute(lambda s: protocol_spec(s.protocol).agreement)

    @factory.post_generation
    def questions(self, create: bool, extracted: object, **kwargs: object) -> None:
        if not create or extracted is False:
            return
        for position, spec in enumerate(protocol_spec(self.protocol).questions):
            Question.objects.create(study=self, key=spec.key, **spec.as_fields(position))


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
    """An image file (a real PNG under MEDIA_ROOT), not yet in any item."""

    class Meta:
        model = Image
        exclude = ("_stored",)

    _stored = factory.Sequence(lambda n: _store(png_bytes(n)))
    sha256 = factory.LazyAttribute(lambda o: o._stored[0])
    file = factory.LazyAttribute(lambda o: o._stored[1])
    width = 32
    height = 32
    format = "PNG"


class ItemFactory(factory.django.DjangoModelFactory):
    """A one-image item (role ``image``) of a study; its file is a fresh PNG."""

    class Meta:
        model = Item
        skip_postgeneration_save = True

    prompt = factory.SubFactory(PromptFactory)
    study = factory.SelfAttribute("prompt.study")
    t2i_model = "sdxl"
    key = factory.Sequence(lambda n: f"sdxl/img_{n:05d}.png")
    seed = factory.Sequence(lambda n: 1000 + n)
    index = 0

    @factory.post_generation
    def image(self, create: bool, extracted: Image | None, **kwargs: object) -> None:
        if create:
            ItemImage.objects.create(
                item=self, image=extracted or ImageFactory(), role=ImageRole.IMAGE, source_path=self.key
            )


class PairItemFactory(ItemFactory):
    """A seed photo (role ``input``) and its edit (role ``output``) as one item."""

    key = factory.Sequence(lambda n: f"pair_{n:05d}")
    t2i_model = "sd15"

    @factory.post_generation
    def image(self, create: bool, extracted: Image | None, **kwargs: object) -> None:
        if create:
            seed = kwargs.get("input") or ImageFactory()
            ItemImage.objects.create(
                item=self, image=seed, role=ImageRole.INPUT, source_path=f"seeds/{seed.sha256[:8]}.png"
            )
            ItemImage.objects.create(
                item=self,
                image=extracted or ImageFactory(),
                role=ImageRole.OUTPUT,
                source_path=f"{self.key}.png",
            )


def question_of(item: Item, key: str = "gender") -> Question:
    return Question.objects.get(study_id=item.study_id, key=key)


def image_of(item: Item, role: str = ImageRole.IMAGE) -> Image:
    return ItemImage.objects.select_related("image").get(item=item, role=role).image


class LabelFactory(factory.django.DjangoModelFactory):
    """A bare label row. Tests of behaviour should go through annotate.services instead."""

    class Meta:
        model = Label

    item = factory.SubFactory(ItemFactory)
    question = factory.LazyAttribute(lambda o: question_of(o.item))
    annotator = factory.SubFactory(UserFactory, role=permissions.ANNOTATOR)
    value = "male"


class FinalLabelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = FinalLabel

    item = factory.SubFactory(ItemFactory)
    question = factory.LazyAttribute(lambda o: question_of(o.item))
    value = "male"
    source = FinalLabelSource.IMPORTED
    decided_at = factory.LazyFunction(timezone.now)


class PredictionFactory(factory.django.DjangoModelFactory):
    """A gender prediction on an image file; ``image=image_of(item)`` ties it to an item."""

    class Meta:
        model = Prediction

    image = factory.SubFactory(ImageFactory)
    detector = "fake"
    version = "1"
    kind = KIND_GENDER
    status = PredictionStatus.OK
    output = factory.LazyFunction(lambda: {"label": "male", "reason": "", "scores": {}})
