"""``manage.py seed_demo``: demo users and a demo study made from photos that ship in packages.

Idempotent: users are found or created, the images are rebuilt deterministically in a
temporary folder and imported through ``images_import``, which skips what is already there.
No image file is committed to the repository: every image comes from scikit-image,
matplotlib or scikit-learn at run time.
"""

from __future__ import annotations

import csv
import os
import tempfile
from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from PIL import Image as PILImage
from PIL import ImageFilter

from annotate import roles
from annotate.ingest import images_import
from annotate.models import Study

DEMO_STUDY_SLUG = "demo"
DEMO_STUDY_NAME = "Demo: real photos"
# Fixed, publicly known demo passwords: fine for a local demo, never for a real deployment.
# BIASLAB_DEMO_PASSWORD replaces them all with one password of your choice.
DEMO_PASSWORDS = {
    "demo-admin": "demo-admin-pass",
    "demo-researcher": "demo-researcher-pass",
    "demo-annotator-1": "demo-annotator-1-pass",
    "demo-annotator-2": "demo-annotator-2-pass",
}
PHOTO_MODEL = "demo-photos"  # unchanged photographs from the packages
DERIVED_MODEL = "demo-derived"  # composites and blurs made from them
SIDE = 512
GUIDELINES = (
    "Label the gender presentation of the one person in the image: M male, F female. "
    "L low quality: no person, several people, or too blurred to tell. "
    "O other, with a short reason. Z goes back one image."
)


@dataclass(frozen=True)
class DemoImage:
    path: str
    t2i_model: str
    category: str
    word: str
    prompt: str
    build: Callable[[], PILImage.Image]


# --- photos from packages --------------------------------------------------------------------------


def _skimage(name: str) -> PILImage.Image:
    from skimage import data

    array = getattr(data, name)()
    return PILImage.fromarray(array).convert("RGB")


def _grace_hopper() -> PILImage.Image:
    from matplotlib import cbook

    with cbook.get_sample_data("grace_hopper.jpg") as fh:
        return PILImage.open(fh).convert("RGB")


def _sklearn(index: int) -> PILImage.Image:
    from sklearn.datasets import load_sample_images

    return PILImage.fromarray(load_sample_images().images[index]).convert("RGB")


def _lfw_face(index: int) -> PILImage.Image:
    from skimage import data

    faces = data.lfw_subset()  # 100 face crops of 25x25 px, then 100 non-faces
    array = (np.clip(faces[index], 0.0, 1.0) * 255).astype(np.uint8)
    return (
        PILImage.fromarray(array).convert("RGB").resize((SIDE // 2, SIDE // 2), PILImage.Resampling.LANCZOS)
    )


def _fit(image: PILImage.Image, side: int = SIDE) -> PILImage.Image:
    image = image.copy()
    image.thumbnail((side, side), PILImage.Resampling.LANCZOS)
    return image


def _side_by_side(left: PILImage.Image, right: PILImage.Image) -> PILImage.Image:
    height = SIDE // 2 + SIDE // 4
    parts = [
        p.resize((round(p.width * height / p.height), height), PILImage.Resampling.LANCZOS)
        for p in (left, right)
    ]
    canvas = PILImage.new("RGB", (sum(p.width for p in parts), height), (255, 255, 255))
    canvas.paste(parts[0], (0, 0))
    canvas.paste(parts[1], (parts[0].width, 0))
    return _fit(canvas)


def _blurred(image: PILImage.Image) -> PILImage.Image:
    return _fit(image).filter(ImageFilter.GaussianBlur(radius=24))


def demo_images() -> list[DemoImage]:
    """The demo study's images: what each shows, and how to build it."""
    person, face, nobody, two, blur = "clear person", "face crop", "no person", "two people", "heavy blur"
    items = [
        DemoImage(
            "photos/astronaut.jpg",
            PHOTO_MODEL,
            person,
            "astronaut",
            "skimage.data.astronaut: astronaut Eileen Collins in her flight suit",
            lambda: _fit(_skimage("astronaut")),
        ),
        DemoImage(
            "photos/cameraman.jpg",
            PHOTO_MODEL,
            person,
            "photographer",
            "skimage.data.camera: a man behind a camera on a tripod, face partly hidden",
            lambda: _fit(_skimage("camera")),
        ),
        DemoImage(
            "photos/grace_hopper.jpg",
            PHOTO_MODEL,
            person,
            "computer scientist",
            "matplotlib sample grace_hopper.jpg: Rear Admiral Grace Hopper in uniform",
            lambda: _fit(_grace_hopper()),
        ),
        DemoImage(
            "photos/coffee.jpg",
            PHOTO_MODEL,
            nobody,
            "coffee",
            "skimage.data.coffee: a cup of coffee, no person",
            lambda: _fit(_skimage("coffee")),
        ),
        DemoImage(
            "photos/chelsea.jpg",
            PHOTO_MODEL,
            nobody,
            "cat",
            "skimage.data.chelsea: Chelsea the cat, no person",
            lambda: _fit(_skimage("chelsea")),
        ),
        DemoImage(
            "photos/rocket.jpg",
            PHOTO_MODEL,
            nobody,
            "rocket",
            "skimage.data.rocket: a rocket on the launch pad, no person",
            lambda: _fit(_skimage("rocket")),
        ),
        DemoImage(
            "photos/china.jpg",
            PHOTO_MODEL,
            nobody,
            "temple",
            "sklearn sample china.jpg: a temple roof, no person",
            lambda: _fit(_sklearn(0)),
        ),
        DemoImage(
            "photos/flower.jpg",
            PHOTO_MODEL,
            nobody,
            "flower",
            "sklearn sample flower.jpg: a flower, no person",
            lambda: _fit(_sklearn(1)),
        ),
    ]
    for n in range(0, 16, 2):
        items.append(
            DemoImage(
                f"faces/lfw_{n:02d}.jpg",
                PHOTO_MODEL,
                face,
                "face",
                f"skimage.data.lfw_subset face {n}: a 25x25 px face crop, upscaled",
                lambda n=n: _lfw_face(n),
            )
        )
    items += [
        DemoImage(
            "derived/astronaut_and_cameraman.jpg",
            DERIVED_MODEL,
            two,
            "two people",
            "composite: astronaut and cameraman side by side",
            lambda: _side_by_side(_skimage("astronaut"), _skimage("camera")),
        ),
        DemoImage(
            "derived/hopper_and_astronaut.jpg",
            DERIVED_MODEL,
            two,
            "two people",
            "composite: Grace Hopper and the astronaut side by side",
            lambda: _side_by_side(_grace_hopper(), _skimage("astronaut")),
        ),
        DemoImage(
            "derived/cameraman_and_face.jpg",
            DERIVED_MODEL,
            two,
            "two people",
            "composite: cameraman and an LFW face side by side",
            lambda: _side_by_side(_skimage("camera"), _lfw_face(4)),
        ),
        DemoImage(
            "derived/astronaut_blurred.jpg",
            DERIVED_MODEL,
            blur,
            "blurred person",
            "the astronaut photo under a heavy Gaussian blur",
            lambda: _blurred(_skimage("astronaut")),
        ),
        DemoImage(
            "derived/hopper_blurred.jpg",
            DERIVED_MODEL,
            blur,
            "blurred person",
            "the Grace Hopper photo under a heavy Gaussian blur",
            lambda: _blurred(_grace_hopper()),
        ),
        DemoImage(
            "derived/cameraman_blurred.jpg",
            DERIVED_MODEL,
            blur,
            "blurred person",
            "the cameraman photo under a heavy Gaussian blur",
            lambda: _blurred(_skimage("camera")),
        ),
    ]
    return items


def demo_folder_write(folder: Path) -> Path:
    """Build every demo image under ``folder`` and write its manifest; returns the manifest path."""
    manifest = folder / "manifest.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "t2i_model", "prompt", "category", "word", "seed", "index", "params"])
        for index, item in enumerate(demo_images()):
            target = folder / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            # Same pixels and settings give the same JPEG bytes, so re-runs are duplicates.
            item.build().save(target, format="JPEG", quality=90)
            writer.writerow(
                [item.path, item.t2i_model, item.prompt, item.category, item.word, "", index, "{}"]
            )
    return manifest


# --- users and study -------------------------------------------------------------------------------


def _password(username: str) -> str:
    return os.environ.get("BIASLAB_DEMO_PASSWORD") or DEMO_PASSWORDS[username]


def _user_ensure(username: str, *, group: str | None = None, staff: bool = False) -> AbstractBaseUser:
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(
        username=username, defaults={"email": f"{username}@example.org"}
    )
    changed = False
    if staff and not (user.is_staff and user.is_superuser):
        user.is_staff = user.is_superuser = True
        changed = True
    password = _password(username)
    if not user.check_password(password):
        user.set_password(password)
        changed = True
    if changed:
        user.save()
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


@transaction.atomic
def demo_people_and_study() -> Study:
    """The four demo users and the demo study, created once and left as they are after."""
    _user_ensure("demo-admin", staff=True)
    _user_ensure("demo-researcher", group=roles.RESEARCHER)
    annotators = [_user_ensure(f"demo-annotator-{n}", group=roles.ANNOTATOR) for n in (1, 2)]
    study, _ = Study.objects.get_or_create(
        slug=DEMO_STUDY_SLUG, defaults={"name": DEMO_STUDY_NAME, "description": GUIDELINES}
    )
    study.annotators.add(*annotators)
    return study


class Command(BaseCommand):
    help = (
        "Create the demo users (demo-admin, demo-researcher, demo-annotator-1, demo-annotator-2; "
        "fixed demo passwords, or BIASLAB_DEMO_PASSWORD for all) and the demo study 'demo' of "
        "real photos shipped in scikit-image, matplotlib and scikit-learn plus low-quality cases "
        "made from them. Safe to run again: nothing is duplicated."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--url",
            default=f"http://{os.environ.get('BIASLAB_ADDR') or '127.0.0.1:8000'}/",
            help="Where the app runs, for the hints (default: BIASLAB_ADDR, as bin/demo serves on it).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = demo_people_and_study()
        with tempfile.TemporaryDirectory(prefix="biaslab-demo-") as folder:
            manifest = demo_folder_write(Path(folder))
            summary = images_import(study=study, manifest_path=manifest, root=folder)
        if summary.rejected:
            for line in summary.lines():
                self.stderr.write(line)
            raise CommandError("Some demo images could not be imported (see above).")
        total = study.images.count()
        self.stdout.write(
            f"Demo study '{study.slug}': {total} images ({summary.accepted} new, {summary.duplicates} already there)."
        )
        self._next_steps(options["url"])

    def _next_steps(self, url: str) -> None:
        custom = bool(os.environ.get("BIASLAB_DEMO_PASSWORD"))
        note = "from BIASLAB_DEMO_PASSWORD" if custom else "fixed demo passwords: local demo only"
        self.stdout.write("")
        self.stdout.write(f"What to do next — open {url} and log in ({note}):")
        roles_text = {
            "demo-annotator-1": "annotator: label with M / F / L / O, Z to go back",
            "demo-annotator-2": "annotator: the second, blind label of each image",
            "demo-researcher": "researcher: agreement, dispute queue, reports",
            "demo-admin": f"admin: {url.rstrip('/')}/admin/ — imports, exports, users",
        }
        for username, role in roles_text.items():
            self.stdout.write(f"  {username:<18} {_password(username):<24} {role}")
