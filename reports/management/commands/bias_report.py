"""``manage.py bias_report``: thin wrapper around ``reports.report.bias_report``.

Formats:

- ``json``: exactly the dict of ``bias_report`` (issue 4's contract).
- ``csv``: three sections, each starting with its own header row whose first column is
  ``section``, separated by an empty line:
  ``models`` — one row per (source, t2i_model), source = ``human`` or a detector key:
  model_bias_score, its ci95, pct_diff and its ci95, prompt_bias_score_difference, n_images;
  ``detectors`` — one row per detector: version, filtering (precision, recall, f1, filter_rate,
  tp, fp, fn, tn) and accuracy (male, female, overall);
  ``prompts`` — one row per (t2i_model, prompt) of the human labels: counts and prompt bias score.
  Empty cells are undefined values. Ratios are fractions, pct_diff is in percent.
- ``md``: the paper's tables as Markdown.
"""

from __future__ import annotations

import csv
import io
import json
from argparse import ArgumentParser
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from reports.report import LABEL_KEYS, bias_report
from reports.selectors import UnknownFilter, check_filters, study_for_slug

MODEL_COLUMNS = (
    "section",
    "source",
    "t2i_model",
    "model_bias_score",
    "model_bias_score_ci95_lo",
    "model_bias_score_ci95_hi",
    "pct_diff",
    "pct_diff_ci95_lo",
    "pct_diff_ci95_hi",
    "prompt_bias_score_difference",
    "n_images",
)
DETECTOR_COLUMNS = (
    "section",
    "detector",
    "version",
    "precision",
    "recall",
    "f1",
    "filter_rate",
    "tp",
    "fp",
    "fn",
    "tn",
    "accuracy_male",
    "accuracy_female",
    "accuracy_overall",
)
PROMPT_COLUMNS = (
    "section",
    "t2i_model",
    "category",
    "word",
    "prompt",
    "n_male",
    "n_female",
    "n_low_quality",
    "n_other",
    "prompt_bias_score",
)


def _ci(interval: Sequence[float] | None) -> tuple[float | None, float | None]:
    return (interval[0], interval[1]) if interval else (None, None)


def _cell(value: Any) -> Any:
    return "" if value is None else value


def report_csv(report: dict[str, Any]) -> str:
    """The report as CSV sections (layout in the module docstring)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(MODEL_COLUMNS)
    for model, human in report["human"].items():
        lo, hi = _ci(human["ci95"])
        writer.writerow(
            map(
                _cell,
                (
                    "models",
                    "human",
                    model,
                    human["model_bias_score"],
                    lo,
                    hi,
                    None,
                    None,
                    None,
                    None,
                    human["n_images"],
                ),
            )
        )
    for key, detector in report["detectors"].items():
        for model, part in detector["per_model"].items():
            writer.writerow(
                map(
                    _cell,
                    (
                        "models",
                        key,
                        model,
                        part["model_bias_score"],
                        *_ci(part["model_bias_score_ci95"]),
                        part["pct_diff"],
                        *_ci(part["ci95"]),
                        part["prompt_bias_score_difference"],
                        part["n_images"],
                    ),
                )
            )
    writer.writerow(())
    writer.writerow(DETECTOR_COLUMNS)
    for key, detector in report["detectors"].items():
        f, a = detector["filtering"], detector["accuracy"]
        writer.writerow(
            map(
                _cell,
                (
                    "detectors",
                    key,
                    detector["version"],
                    *(f[k] for k in ("precision", "recall", "f1", "filter_rate", "tp", "fp", "fn", "tn")),
                    a["male"],
                    a["female"],
                    a["overall"],
                ),
            )
        )
    writer.writerow(())
    writer.writerow(PROMPT_COLUMNS)
    for model, human in report["human"].items():
        for p in human["prompts"]:
            writer.writerow(map(_cell, ("prompts", model, *(p[c] for c in PROMPT_COLUMNS[2:]))))
    return out.getvalue()


# --- Markdown ---------------------------------------------------------------------------------


# Shown where there is no number (no clear image, no prediction): an en dash.
NO_VALUE = "\u2013"


def _f(value: float | None, digits: int = 3) -> str:
    return NO_VALUE if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return NO_VALUE if value is None else f"{value * 100:.2f}"


def _signed(value: float | None) -> str:
    if value is None:
        return NO_VALUE
    arrow = "↑" if value > 0 else "↓" if value < 0 else ""
    return f"{value:+.2f} % {arrow}".rstrip()


def _md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def clean(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(clean, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(clean, row)) + " |" for row in rows]
    return [*lines, ""]


def report_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the paper's tables 1, 2, 3, 5, 6 and 7."""
    human, detectors = report["human"], report["detectors"]
    models = list(human)
    for detector in detectors.values():
        models += [m for m in detector["per_model"] if m not in models]
    agreement = report["agreement"]
    lines = [
        "# Bias report",
        "",
        f"Images: {report['coverage']['images']}, with a final label: {report['coverage']['final_labels']}. "
        f"Cohen's kappa {_f(agreement['cohen_kappa'])} on {agreement['n_images']} images with two labels.",
        "",
    ]
    if not report["coverage"]["final_labels"]:
        # Empty tables alone read like a bug; say what is missing and how to get it.
        lines += [
            "No image has a final label yet, so there is nothing to compare: label the images "
            "(two annotators each) and settle the disputes, or load labels with import_ground_truth.",
            "",
        ]
    lines += [
        "## Model bias score (table 1)",
        "",
        "Detectors: score on the images they predicted, and the signed difference from the human "
        "score of the same images (95 % bootstrap interval of the difference in brackets).",
        "",
    ]
    rows = []
    row = ["Human"]
    for model in models:
        h = human.get(model)
        if h is None:
            row.append(NO_VALUE)
            continue
        ci = h["ci95"]
        row.append(_f(h["model_bias_score"]) + (f" [{_f(ci[0])}, {_f(ci[1])}]" if ci else ""))
    rows.append(row)
    for key, detector in detectors.items():
        row = [key]
        for model in models:
            part = detector["per_model"].get(model)
            if part is None:
                row.append(NO_VALUE)
                continue
            ci = part["ci95"]
            interval = f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else ""
            row.append(f"{_f(part['model_bias_score'])} ({_signed(part['pct_diff'])}{interval})")
        rows.append(row)
    lines += _md_table(["Source", *models], rows)

    lines += ["## Prompt bias score difference (table 2)", ""]
    lines += _md_table(
        ["Detector", *models],
        [
            [key, *(_f(d["per_model"].get(m, {}).get("prompt_bias_score_difference")) for m in models)]
            for key, d in detectors.items()
        ],
    )

    lines += ["## Filtering and accuracy, % (table 3)", ""]
    rows = []
    for key, d in detectors.items():
        f, a = d["filtering"], d["accuracy"]
        rows.append(
            [
                key,
                d["version"],
                *(_pct(f[k]) for k in ("precision", "recall", "f1", "filter_rate")),
                *(_pct(a[k]) for k in ("male", "female", "overall")),
                *(f[k] for k in ("tp", "fp", "fn", "tn")),
            ]
        )
    header = ["Detector", "Version", "Precision", "Recall", "F1", "Filter rate", "Acc. male", "Acc. female"]
    lines += _md_table([*header, "Acc. overall", "TP", "FP", "FN", "TN"], rows)

    lines += ["## Label shares, % (table 5)", ""]
    lines += _md_table(
        ["T2I model", *LABEL_KEYS, "images"],
        [[m, *(_pct(h["label_shares"][k]) for k in LABEL_KEYS), h["n_images"]] for m, h in human.items()],
    )

    categories = sorted({c for h in human.values() for c in h["categories"]})
    lines += ["## Category bias scores (table 6)", ""]
    lines += _md_table(
        ["T2I model", *categories, "Model bias score"],
        [
            [m, *(_f(h["categories"].get(c)) for c in categories), _f(h["model_bias_score"])]
            for m, h in human.items()
        ],
    )

    lines += ["## Prompt bias scores (table 7)", ""]
    lines += _md_table(
        ["T2I model", "Category", "Word", "Male", "Female", "Low quality", "Other", "Score"],
        [
            [
                m,
                p["category"],
                p["word"],
                p["n_male"],
                p["n_female"],
                p["n_low_quality"],
                p["n_other"],
                _f(p["prompt_bias_score"], 2),
            ]
            for m, h in human.items()
            for p in h["prompts"]
        ],
    )
    return "\n".join(lines)


class Command(BaseCommand):
    help = (
        "Bias of each T2I model by the human final labels and by every detector (latest version "
        "per detector), with filtering and accuracy: the paper's tables. --format json prints the "
        "contract of issue 4; csv prints sections 'models', 'detectors', 'prompts' (see the module "
        "docstring); md prints Markdown tables."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--format", choices=("json", "csv", "md"), default="json", help="json (default), csv or md."
        )
        parser.add_argument("--study", default="", help="Study slug (default: all studies together).")
        parser.add_argument("--t2i-model", default="", help="Only images of this T2I model.")
        parser.add_argument("--detector", default="", help="Only this detector.")
        parser.add_argument(
            "--bootstrap",
            type=int,
            default=1000,
            help="Bootstrap resamples for the 95 %% intervals (0: none).",
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the bootstrap (default 0).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["bootstrap"] < 0:
            raise CommandError("--bootstrap must be 0 or more.")
        t2i_model = options["t2i_model"] or None
        detector = options["detector"] or None
        try:
            study = study_for_slug(options["study"])
            check_filters(study=study, t2i_model=t2i_model, detector=detector)
        except UnknownFilter as exc:
            raise CommandError(str(exc)) from exc
        report = bias_report(
            study=study,
            t2i_model=t2i_model,
            detector=detector,
            bootstrap=options["bootstrap"],
            seed=options["seed"],
        )
        if options["format"] == "json":
            self.stdout.write(json.dumps(report, indent=2))
        elif options["format"] == "csv":
            self.stdout.write(report_csv(report), ending="")
        else:
            self.stdout.write(report_markdown(report), ending="")
