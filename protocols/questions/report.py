"""The questions report: answer shares per group, their tests, agreement, detectors, judges
(keys: docs/reference/contracts.md)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from metrics import agreement as agreement_metrics
from metrics import questions as qm
from protocols.questions import selectors as qsel
from protocols.questions.spec import KIND_ANSWERS
from reports import judges
from reports.selectors import Scope, final_answers
from reports.tables import num
from studies.models import Question


@dataclass(frozen=True)
class QuestionsResult:
    """The JSON report and what the pages need beside it."""

    report: dict[str, Any]
    questions: list[Question]
    column: str
    items: int
    items_without_group: int


def _shares_dict(comparison: qm.SharesComparison) -> dict[str, Any]:
    return {
        "groups": {
            group: {
                "n": shares.n,
                "shares": dict(shares.shares),
                "ci95": {a: list(ci) for a, ci in shares.ci95.items()},
            }
            for group, shares in comparison.groups.items()
        },
        "chi2": comparison.test.chi2,
        "dof": comparison.test.dof,
        "p_value": comparison.test.p_value,
        "cramers_v": comparison.test.cramers_v,
        "max_gap": dict(comparison.max_gap),
    }


def compute(scope: Scope, *, questions: list[Question], detector: str | None = None) -> QuestionsResult:
    column = qsel.compare_column(scope.study)
    groups = qsel.item_groups(scope, column)
    finals = final_answers(scope)
    runs = judges.judge_runs(scope, kinds=[KIND_ANSWERS], detector=detector)
    report: dict[str, Any] = {
        "questions": {},
        "agreement": {},
        "detectors": {},
        "judges": {},
        "judge_versions": {},
    }

    def grouped(answers: dict[int, dict[str, str]], question: Question) -> dict[str, dict[str, list[str]]]:
        """T2I model -> group -> the answers to ``question`` (one of its values) of the items with a group."""
        out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for item_id, said in answers.items():
            model, group = groups.get(item_id, ("", ""))
            if group and (answer := said.get(question.key)) in question.values:
                out[model][group].append(answer)
        return out

    for question in questions:
        people = grouped(finals, question)
        judged = {name: grouped(run.answers, question) for name, run in runs.items()}
        cell: dict[str, Any] = {}
        for model in sorted(people):
            comparison = qm.answer_shares(people[model], question.values)
            cell[model] = _shares_dict(comparison) | {"judges": {}}
            for name, by_model in judged.items():
                if model in by_model:
                    picture = qm.answer_shares(by_model[model], question.values)
                    cell[model]["judges"][name] = _shares_dict(picture) | {
                        "max_gap_error": qm.max_gap_error(picture.max_gap, comparison.max_gap)
                    }
        report["questions"][question.key] = cell
    units = qsel.label_values(scope)
    for question in questions:
        by_item = list(units.get(question.key, {}).values())
        fleiss = agreement_metrics.fleiss_kappa(by_item)
        alpha = agreement_metrics.krippendorff_alpha_nominal(by_item)
        report["agreement"][question.key] = {
            "krippendorff_alpha": alpha.alpha,
            "fleiss_kappa": fleiss.kappa,
            "observed_agreement": fleiss.observed_agreement,
            "n_items": fleiss.n_items,
        }
    versions, answers = qsel.detector_answers(scope, detector=detector)
    for name in versions:
        per_question: dict[str, Any] = {}
        for question in questions:
            truth, predicted, by_group = [], [], defaultdict(list)
            for item_id, said in answers[name].items():
                final = finals.get(item_id, {}).get(question.key)
                answer = said.get(question.key)
                if final is None or answer is None:
                    continue
                truth.append(final)
                predicted.append(answer)
                group = groups.get(item_id, ("", ""))[1]
                if group:
                    by_group[group].append(answer)
            if not truth:
                continue
            per_question[question.key] = {
                "n": len(truth),
                "accuracy": qm.accuracy(truth, predicted),
                "cohen_kappa": qm.cohen_kappa(truth, predicted),
                "groups": {
                    group: {"shares": dict(qm.group_shares(said, question.values).shares)}
                    for group, said in sorted(by_group.items())
                },
            }
        report["detectors"][name] = per_question
    report.update(judges.judged([(q.key, q.values) for q in questions], runs, finals))
    return QuestionsResult(
        report=report,
        questions=questions,
        column=column,
        items=len(groups),
        items_without_group=sum(1 for _, group in groups.values() if not group),
    )


def csv_rows(result: QuestionsResult) -> list[list[Any]]:
    """``bias_report --format csv``: sections ``shares``, ``tests``, ``agreement``,
    ``detectors``, each with its own header row (first column ``section``), one blank row
    between them."""
    report = result.report
    tests = ("chi2", "dof", "p_value", "cramers_v")
    agreement = ("krippendorff_alpha", "fleiss_kappa", "observed_agreement", "n_items")
    judged = ("n", "accuracy", "cohen_kappa")
    rows: list[list[Any]] = [
        ["section", "question", "t2i_model", "group", "answer", "n", "share", "ci95_lo", "ci95_hi"]
    ]
    for key, by_model in report["questions"].items():
        for model, cell in by_model.items():
            for group, g in cell["groups"].items():
                for answer, share in g["shares"].items():
                    lo, hi = g["ci95"][answer]
                    rows.append(["shares", key, model, group, answer, g["n"], share, lo, hi])
    rows += [[], ["section", "question", "t2i_model", *tests, "answer", "max_gap"]]
    for key, by_model in report["questions"].items():
        for model, cell in by_model.items():
            for answer, gap in cell["max_gap"].items():
                rows.append(["tests", key, model, *(cell[k] for k in tests), answer, gap])
    rows += [[], ["section", "question", *agreement]]
    for key, a in report["agreement"].items():
        rows.append(["agreement", key, *(a[k] for k in agreement)])
    rows += [[], ["section", "detector", "question", *judged, "group", "answer", "share"]]
    for name, by_question in report["detectors"].items():
        for key, d in by_question.items():
            for group, g in d["groups"].items():
                for answer, share in g["shares"].items():
                    rows.append(["detectors", name, key, *(d[k] for k in judged), group, answer, share])
    return rows


def markdown(result: QuestionsResult) -> str:
    """``bias_report --format md``: per question and T2I model, the shares table (share and
    95 % interval per group and answer) and the test; then agreement and detectors."""
    report = result.report
    lines = [f"# Questions report (groups: {result.column})", ""]
    for question in result.questions:
        lines += [f"## {question.key}: {question.text}", ""]
        for model, cell in report["questions"][question.key].items():
            values = question.values
            lines += [f"### {model}", "", "| group | n | " + " | ".join(values) + " |"]
            lines.append("|---|---:|" + "---:|" * len(values))
            for group, g in cell["groups"].items():
                shares = [
                    f"{g['shares'][a]:.1%} [{g['ci95'][a][0]:.1%}, {g['ci95'][a][1]:.1%}]" for a in values
                ]
                lines.append(f"| {group} | {g['n']} | " + " | ".join(shares) + " |")
            lines += [
                "",
                f"χ² = {cell['chi2']:.3f}, dof = {cell['dof']}, p = {cell['p_value']:.4g}, "
                f"Cramér's V = {cell['cramers_v']:.3f}; largest gap: "
                + ", ".join(f"{a} {gap:.1%}" for a, gap in cell["max_gap"].items()),
                "",
            ]
    lines += [
        "## Agreement",
        "",
        "| question | Krippendorff \u03b1 | Fleiss \u03ba | observed | items |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, a in report["agreement"].items():
        lines.append(
            f"| {key} | {num(a['krippendorff_alpha'])} | {num(a['fleiss_kappa'])} | "
            f"{num(a['observed_agreement'])} | {a['n_items']} |"
        )
    lines.append("")
    return "\n".join(lines)
