"""``manage.py create_join_link``: thin wrapper around ``crowd.services.join_link_create``."""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from crowd.services import DEFAULT_PANEL_PARAMS, guideline_examples_set, join_link_create
from studies.commands import DomainCommand, add_study_argument, study_from_options


def _example(raw: str) -> tuple[str, str, str]:
    """``[QUESTION:]ANSWER=ITEM_KEY`` → (question, answer, item key)."""
    answer, sep, item_key = raw.partition("=")
    if not sep or not answer or not item_key:
        raise CommandError(
            f"--example {raw!r}: write [QUESTION:]ANSWER=ITEM_KEY, e.g. gender:female=img/0042.png"
        )
    question, _, value = answer.rpartition(":")
    return question, value, item_key


class Command(DomainCommand):
    help = (
        "Make a join link for a crowd panel: anyone opening its URL gets an annotator account of "
        "the study alone (identified by the panel's id parameter), reads the guidelines, labels "
        "--quota items and is shown --completion-code and sent to --completion-url. Prints the "
        "URL, which is shown only this once (only its hash is stored)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_study_argument(parser)
        parser.add_argument("--quota", type=int, required=True, help="Items per participant (gold included).")
        parser.add_argument(
            "--completion-url", required=True, help="http(s) URL participants are sent to at the end."
        )
        parser.add_argument("--completion-code", required=True, help="Code shown to participants at the end.")
        parser.add_argument(
            "--panel-param",
            action="append",
            metavar="NAME",
            help=f"Query parameter carrying the panel's participant id; repeat for several, the first "
            f"present wins (default: {', '.join(DEFAULT_PANEL_PARAMS)}; 'none': the browser session alone).",
        )
        parser.add_argument(
            "--max-participants", type=int, help="Participants the link takes at most (default: no cap)."
        )
        parser.add_argument(
            "--expires-in-hours", type=float, help="The link takes no one after this (default: never)."
        )
        parser.add_argument(
            "--example",
            action="append",
            default=[],
            metavar="[QUESTION:]ANSWER=ITEM_KEY",
            help="The item shown on the first screen as the example of an answer; repeat per answer "
            "(QUESTION may be left out when the study asks one question). Kept for the study's later links.",
        )
        parser.add_argument(
            "--base-url",
            default="",
            help="The site's address, printed before the link's path (default: BIASLAB_BASE_URL).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_from_options(options)
        params = options["panel_param"] or list(DEFAULT_PANEL_PARAMS)
        if [p.lower() for p in params] == ["none"]:
            params = []
        hours = options["expires_in_hours"]
        if hours is not None and hours <= 0:
            raise CommandError(f"--expires-in-hours must be more than 0 (got {hours}).")
        examples = [_example(raw) for raw in options["example"]]
        with transaction.atomic():
            link, token = join_link_create(
                study=study,
                quota=options["quota"],
                completion_url=options["completion_url"],
                completion_code=options["completion_code"],
                panel_params=params,
                max_participants=options["max_participants"],
                expires_at=timezone.now() + timedelta(hours=hours) if hours is not None else None,
            )
            guideline_examples_set(study=study, examples=examples)
        url = (options["base_url"] or settings.BIASLAB_BASE_URL).rstrip("/") + reverse(
            "crowd:join", kwargs={"token": token}
        )
        reads = f"; the panel appends ?{link.param_names[0]}=<id>" if link.param_names else ""
        self.stderr.write(f"Join link {link.pk} of {study.slug} (quota {link.quota}{reads}), shown only now:")
        self.stdout.write(url)
