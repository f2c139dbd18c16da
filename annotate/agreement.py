"""Agreement of a study's annotators on one question, as a plain dict.

Glue only: ``annotate.selectors.label_rows_for_agreement`` reads the label rows, the pure
``metrics.agreement.agreement_summary`` computes. Shared by the agreement page and the API (and
meant for the ``agreement`` command), so none of them imports ``reports``.
"""

from __future__ import annotations

from typing import Any

from annotate.selectors import label_rows_for_agreement
from metrics.agreement import agreement_summary
from studies.models import Question, Study


def agreement_report(
    *, study: Study, question: Question, t2i_model: str | None = None, category: str | None = None
) -> dict[str, Any]:
    """Agreement of the study's annotators on ``question``, over the items with two or more
    answers to it (optionally of one T2I model / prompt category).

    The keys of ``AgreementSummary.as_dict`` (labels, n_images, cohen_kappa, observed and
    expected agreement, confusion, per_t2i_model, per_category, per_annotator_pair,
    fleiss_kappa, krippendorff_alpha — None where undefined) plus study, question,
    question_text, label_names (the display names of ``labels``), n_items and
    max_labels_per_item (the new names of n_images and max_labels_per_image).
    """
    rows = label_rows_for_agreement(study=study, question=question, t2i_model=t2i_model, category=category)
    report = agreement_summary(rows, labels=question.values).as_dict()
    report.update(
        study=study.slug,
        question=question.key,
        question_text=question.text,
        label_names=[question.display(value) for value in report["labels"]],
        n_items=report["n_images"],
        max_labels_per_item=report["max_labels_per_image"],
    )
    return report
