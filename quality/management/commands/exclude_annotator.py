"""``manage.py exclude_annotator USER --study S``: thin wrapper around
``quality.services.annotator_exclude`` / ``annotator_include``."""

from __future__ import annotations

import getpass
from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from quality.services import annotator_exclude, annotator_include
from studies.commands import DomainCommand, add_study_argument
from studies.selectors import study_chosen


class Command(DomainCommand):
    help = (
        "Exclude an annotator from a study: their labels stop counting (final labels and disputes "
        "recomputed, each change recorded), their seats reopen for others and they can no longer "
        "label it. --include undoes it: their labels come back where the seat is still free."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("username", help="The annotator's username.")
        add_study_argument(parser)
        parser.add_argument("--reason", default="", help="Why (kept with the exclusion).")
        parser.add_argument("--include", action="store_true", help="Re-include an excluded annotator.")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = f"shell user {getpass.getuser()}"
        study = study_chosen(options["study"])
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user named '{options['username']}'")
        if options["include"]:
            done = annotator_include(study=study, annotator=user, actor=actor)
            self.stdout.write(
                f"Re-included {user.get_username()} in '{study.slug}': {done.labels_returned} of "
                f"{done.labels_moved} label(s) back."
            )
            return
        done = annotator_exclude(study=study, annotator=user, actor=actor, reason=options["reason"])
        self.stdout.write(
            f"Excluded {user.get_username()} from '{study.slug}': {done.labels_moved} label(s) set aside, "
            f"{done.finals_changed} agreed final label(s) changed."
        )
