"""``manage.py create_study``: thin wrapper around ``studies.services.study_define``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.core.validators import validate_slug

from studies.commands import DomainCommand
from studies.models import AgreementRule
from studies.protocols import PROTOCOLS
from studies.services import GoldRule, questions_csv_read, study_define


class Command(DomainCommand):
    help = (
        "Create a study of a protocol with its questions (the protocol's preset unless --questions "
        "gives a CSV with columns key, text, choices as value:Display name[:key]|…, optional kind, "
        "hotkey, default, unresolvable, requires_reason, clear; questions the protocol's report "
        "cannot read are refused, e.g. a gender study without a 'gender' question marking two "
        "answers clear). Running it again with the same "
        "arguments changes nothing; on an existing study, options left out keep their current "
        "values. Different arguments are applied while the study has no labels, and refused "
        "with a clear error once it has."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug", help="Short name used in URLs and commands.")
        parser.add_argument(
            "--protocol",
            choices=list(PROTOCOLS),
            help="The kind of study (required): " + ", ".join(PROTOCOLS) + ".",
        )
        parser.add_argument("--name", help="Name shown to researchers (default: from the slug).")
        parser.add_argument(
            "--labels-per-item", type=int, help="Annotators per item (default: the protocol's)."
        )
        parser.add_argument(
            "--agreement",
            "--aggregation",
            dest="agreement",
            choices=AgreementRule.values,
            help="How labels become final answers: an agreement rule, or a truth-inference model "
            "(dawid_skene, glad, mace) run by recompute_finals. Default: the protocol's.",
        )
        parser.add_argument(
            "--min-posterior",
            type=float,
            metavar="P",
            help="With a truth-inference rule: the posterior an answer needs to become final (default 0.9).",
        )
        parser.add_argument("--questions", help="Questions CSV (default: the protocol's preset questions).")
        parser.add_argument(
            "--gold-rate",
            type=float,
            metavar="SHARE",
            help="Share of the items served that are gold items (attention checks), e.g. 0.1; 0: none.",
        )
        parser.add_argument(
            "--min-gold-accuracy",
            type=float,
            metavar="SHARE",
            help="Flag annotators whose gold accuracy is below this, e.g. 0.8 (needs gold items).",
        )
        parser.add_argument(
            "--min-gold",
            type=int,
            metavar="N",
            help="Gold answers an annotator needs before the rule can flag them (default 5).",
        )
        # The settings protocols ask for (``ProtocolSpec.options``), once per name.
        added: set[str] = set()
        for spec in PROTOCOLS.values():
            for option in spec.options:
                if option.name not in added:
                    added.add(option.name)
                    parser.add_argument(
                        "--" + option.name.replace("_", "-"),
                        dest=f"option_{option.name}",
                        metavar=option.metavar,
                        help=option.help,
                    )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["protocol"]:
            known = "; ".join(f"{key} ({spec.title or key})" for key, spec in PROTOCOLS.items())
            raise CommandError(f"create_study needs --protocol, one of: {known}")
        try:
            validate_slug(options["slug"])
            if len(options["slug"]) > 200:
                raise ValidationError("too long")
        except ValidationError as exc:
            raise CommandError(
                f"study slug {options['slug']!r} must be at most 200 letters, digits, '-' and '_'"
            ) from exc
        questions = questions_csv_read(options["questions"]) if options["questions"] else None
        result = study_define(
            slug=options["slug"],
            protocol=options["protocol"],
            name=options["name"],
            labels_per_item=options["labels_per_item"],
            agreement=options["agreement"],
            questions=questions,
            parameters={
                key.removeprefix("option_"): value
                for key, value in options.items()
                if key.startswith("option_") and value is not None
            },
            min_posterior=options["min_posterior"],
            gold=GoldRule(
                rate=options["gold_rate"],
                min_accuracy=options["min_gold_accuracy"],
                min_gold=options["min_gold"],
            ),
        )
        study = result.study
        n_questions = study.questions.count()
        if result.created:
            self.stdout.write(
                f"Created study '{study.slug}' ({study.protocol}, {n_questions} question(s), "
                f"{study.labels_per_item} labels per item, {study.agreement})."
            )
        elif result.changed:
            self.stdout.write(f"Updated study '{study.slug}': {', '.join(result.changed)}.")
        else:
            self.stdout.write(f"Study '{study.slug}' already exists as defined; nothing changed.")
