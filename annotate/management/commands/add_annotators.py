"""``manage.py add_annotators``: thin wrapper around ``studies.services.annotators_add``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounts.selectors import password_set_days, password_set_path
from studies.commands import add_study_argument, study_from_options
from studies.errors import DomainError, StaffRefused
from studies.services import annotators_add


class Command(BaseCommand):
    help = (
        "Make the named users annotators of a study: a missing account is created without a "
        "password, and a one-time link to set one is printed for it (shown only now; it works "
        "once, for PASSWORD_RESET_TIMEOUT, 3 days by default); every account joins the annotator "
        "group and the study. Running it again changes nothing and says so. Researchers and "
        "admins are refused unless --allow-staff; an invalid username, a deactivated account or "
        "an unknown study is refused in one line, and then nothing is written."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "usernames",
            nargs="+",
            metavar="USERNAME",
            help="One or more usernames (letters, digits and @ . + - _).",
        )
        add_study_argument(parser)
        parser.add_argument(
            "--allow-staff",
            action="store_true",
            help="Also add researchers and admins as annotators of the study (refused without it).",
        )
        parser.add_argument(
            "--base-url",
            default="",
            metavar="URL",
            help="Where people open BiasLab, for the links (default: BIASLAB_BASE_URL, "
            "http://127.0.0.1:8000 unless set).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_from_options(options)
        base = (options["base_url"] or settings.BIASLAB_BASE_URL).rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise CommandError(f"--base-url {base!r} is not an http(s) address; nothing was changed")
        try:
            done = annotators_add(
                study=study, usernames=options["usernames"], allow_staff=options["allow_staff"]
            )
        except StaffRefused as exc:
            raise CommandError(f"{exc} (pass --allow-staff to add them)") from exc
        except DomainError as exc:
            raise CommandError(str(exc)) from exc
        days = password_set_days()
        for user in done.created:
            self.stdout.write(
                f"{user.get_username()}: new account, annotator of '{study.slug}'; set its password "
                f"within {days} day{'s' if days != 1 else ''} (the link works once): "
                f"{base}{password_set_path(user)}"
            )
        for user in done.added:
            self.stdout.write(f"{user.get_username()}: existing account, now an annotator of '{study.slug}'")
        for name in done.unchanged:
            self.stdout.write(f"{name}: already an annotator of '{study.slug}'; no change")
        if not done.changed:
            self.stdout.write("Nothing changed.")
