"""The pair-change report of a study as a plain dict (keys: docs/reference/contracts.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics import pair_change as pc
from protocols.pair_change import selectors as psel
from protocols.pair_change.sampling import MeasureSources, PairRow, pair_measurements, study_thresholds
from reports.selectors import Scope

#: Attribute -> the keys of a word entry that belong to it.
WORD_KEYS = {pc.AGE: ("age",), pc.GENDER: ("gender", "gender_m2f", "gender_f2m"), pc.SKIN: ("skin",)}


@dataclass(frozen=True)
class PairChangeReport:
    """A computed pair-change report with what its pages need besides the JSON."""

    report: dict[str, Any]
    results: dict[str, pc.PairChangeResult]
    sources: MeasureSources
    thresholds: pc.Thresholds
    rows: tuple[PairRow, ...]
    validation: dict[str, pc.ValidationResult]
    overall: pc.Accuracy
    drawn: dict[str, dict[str, str]]

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.results)

    def defined(self, attribute: str) -> bool:
        """Whether a detector measures ``attribute`` (else its figures are null)."""
        return self.sources.sources.get(attribute) is not None

    def words(self, model: str, domain: str | None = None) -> list[pc.WordScore]:
        """The word scores of ``model`` (of ``domain`` when given), in report order."""
        result = self.results.get(model)
        if result is None:
            return []
        return [w for w in result.words if domain is None or w.domain == domain]

    def word_value(self, word: pc.WordScore, key: str) -> float | None:
        """A figure of a word entry (``age``, ``gender``, ``gender_m2f``, ``gender_f2m``,
        ``skin``), None when its attribute has no source."""
        attribute = next(a for a, keys in WORD_KEYS.items() if key in keys)
        return getattr(word, key) if self.defined(attribute) else None

    def cell(self, model: str, domain: str, attribute: str) -> dict[str, Any] | None:
        """A domain x attribute entry of the JSON (``pair_mean_abs`` …), None when absent."""
        return self.report["pair_change"].get(model, {}).get("domains", {}).get(domain, {}).get(attribute)


def model_entry(result: pc.PairChangeResult, sources: Mapping[str, str | None]) -> dict[str, Any]:
    """``pair_change.<t2i_model>``: the metrics' dict with the sources first, and every figure
    of an attribute without a source null (its cells count every pair as unmeasured)."""
    body = result.as_dict()
    missing = [attribute for attribute in pc.ATTRIBUTES if sources.get(attribute) is None]
    for attribute in missing:
        for cells in body["domains"].values():
            n_pairs = cells[attribute]["n_pairs"]
            cells[attribute] = {
                "pair_mean_abs": None,
                "word_mean_abs": None,
                "n_pairs": n_pairs,
                "n_unmeasured": n_pairs,
            }
        for entry in body["words"].values():
            for key in WORD_KEYS[attribute]:
                entry[key] = None
    if missing:
        body["model_score"] = pc.model_score(
            {
                d: {a: cell["pair_mean_abs"] for a, cell in cells.items()}
                for d, cells in body["domains"].items()
            }
        )
    return {"sources": {attribute: sources.get(attribute) for attribute in pc.ATTRIBUTES}, **body}


def _validation(
    study_drawn: Mapping[str, Mapping[str, str]],
    answers: Mapping[tuple[str, str], str | None],
) -> tuple[dict[str, pc.ValidationResult], pc.Accuracy]:
    """Per attribute: the draws' automatic verdicts against the human final answers; and
    every attribute pooled, with its Wilson interval."""
    results = {}
    for attribute in pc.ATTRIBUTES:
        drawn = study_drawn.get(attribute, {})
        keys = list(drawn)
        results[attribute] = pc.validation(
            attribute, [drawn[key] for key in keys], [answers.get((key, attribute)) for key in keys]
        )
    n = sum(r.n for r in results.values())
    correct = sum(r.n_correct for r in results.values())
    overall = pc.Accuracy(correct / n if n else None, pc.wilson_interval(correct, n), n, correct)
    return results, overall


def compute(
    scope: Scope,
    *,
    detector: str | None = None,
    measure: str | Mapping[str, str] | None = None,
    labels: Mapping[str, Mapping[str, str]],
) -> PairChangeReport:
    """The report of the pairs in scope (T2I model filter applied, category not);
    PairChangeInputError names a bad pair, MeasureSourceError an undecided source."""
    study = scope.study
    thresholds = study_thresholds(study)
    measured = pair_measurements(study, t2i_model=scope.t2i_model, measure=measure, detector=detector)
    sources = measured.sources.sources
    results = {
        model: pc.pair_change([row.pair for row in rows], thresholds)
        for model, rows in measured.by_model().items()
    }
    drawn = psel.drawn_verdicts(study, t2i_model=scope.t2i_model)
    answers = psel.final_answers(
        study, keys={key for by_key in drawn.values() for key in by_key}, labels=labels
    )
    validation, overall = _validation(drawn, answers)
    n_scored = len(measured.rows)
    report = {
        "pair_change": {model: model_entry(result, sources) for model, result in results.items()},
        "validation": {
            attribute: {
                **result.as_dict(),
                "n_drawn": result.n + result.n_unanswered,
                "n_unanswered": result.n_unanswered,
            }
            for attribute, result in validation.items()
        },
        "validation_overall": overall.as_dict(),
        "coverage": {
            "pairs": n_scored + len(measured.left_out),
            "pairs_scored": n_scored,
            "pairs_left_out": len(measured.left_out),
            "left_out_reasons": dict(Counter(row.reason for row in measured.left_out).most_common()),
        },
        "detector_versions": measured.sources.source_versions(),
        "candidates": {attribute: list(names) for attribute, names in measured.sources.candidates.items()},
        "samples": psel.sample_summaries(study),
    }
    return PairChangeReport(
        report=report,
        results=results,
        sources=measured.sources,
        thresholds=thresholds,
        rows=measured.rows,
        validation=validation,
        overall=overall,
        drawn=drawn,
    )
