"""Agreement of a study's annotators on one question, as a dict."""

from __future__ import annotations

from typing import Any

from annotate.selectors import label_rows_for_agreement
from metrics.agreement import agreement_summary
from studies.models import Question, Study


def agreement_report(
    *, study: Study, question: Question, t2i_model: str | None = None, category: str | None = None
) -> dict[str, Any]:
    """``AgreementSummary.as_dict`` for ``question`` plus the study's and question's names and counts."""
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
