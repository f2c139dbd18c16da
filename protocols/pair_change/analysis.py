"""The pair-change analysis (BiasPainter, Wang et al. 2024): how far an editing model changes
age, gender and skin tone per word, domain and model, and how often people agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from metrics import pair_change as pc
from protocols.pair_change import report as pair_report
from protocols.pair_change import selectors as psel
from protocols.pair_change import tables as ptables
from protocols.pair_change.report import PairChangeReport
from protocols.pair_change.sampling import MeasureSourceError, study_thresholds
from reports.analyses import Analysis, AnalysisError, ReportOption, ReportPage, chart_src, data_version
from reports.selectors import Scope
from reports.tables import Table, UnknownTable
from studies.models import Study

CHARTS = ("word_scores",)


class PairChangeAnalysis(Analysis):
    protocol = "pair_change"
    title = "Pair change (BiasPainter): how edits change age, gender and skin tone"
    template = "pair_change/overview.html"
    table_keys = csv_tables = ptables.TABLE_KEYS
    builders = ptables.BUILDERS
    paper = ptables.PAPER
    report_name = "pair-change"
    chart_keys = CHARTS
    pages = frozenset({"pair_word"})
    options = (
        ReportOption(
            flag="--measure",
            help="Pair-change studies: the detector measuring each attribute where several do, e.g. "
            "age=face_age_gender,gender=face_age_gender,skin=skin_tone.",
            keyword="measure",
            studies="pair-change",
        ),
    )

    def check(self, study: Study) -> None:
        """AnalysisError when a question (age, gender, skin) cannot be compared with the
        verdicts, or a threshold is not a positive number."""
        try:
            psel.human_labels(study)
            study_thresholds(study)
        except (psel.QuestionMismatch, pc.PairChangeInputError) as error:
            raise AnalysisError(str(error)) from None

    def compute(
        self,
        scope: Scope,
        *,
        detector: str | None = None,
        bootstrap: int = 0,
        seed: int = 0,
        measure: str | Mapping[str, str] | None = None,
    ) -> PairChangeReport:
        """The report (``report.compute``); ``measure`` picks each attribute's detector,
        ``bootstrap`` and ``seed`` are unused (Wilson intervals)."""
        try:
            return pair_report.compute(
                Scope(scope.study, t2i_model=scope.t2i_model),
                detector=detector,
                measure=measure,
                labels=psel.human_labels(scope.study),
            )
        except (pc.PairChangeInputError, MeasureSourceError, psel.QuestionMismatch) as error:
            raise AnalysisError(str(error)) from None

    def overview(self, page: ReportPage) -> dict[str, Any]:
        result: PairChangeReport = page.result(bootstrap=0)
        domain = page.scope.category
        version = data_version(page)
        # Per T2I model and domain: its Figure 4 chart and its most biased words per direction.
        domains = [
            {
                "model": model,
                "domain": name,
                "src": chart_src("word_scores", page, t2i_model=model, category=name, v=version),
                "query": page.query(t2i_model=model, category=name),
                "n_words": len(result.words(model, name)),
                "directions": [
                    {
                        "key": key,
                        "header": header,
                        "words": ptables.most_biased(result, model, name, figure, sign),
                    }
                    for key, header, figure, sign in ptables.DIRECTIONS
                ],
            }
            for model in result.models
            for name in result.results[model].domains
            if not domain or name == domain
        ]
        index: dict[str, set[str]] = {}
        for model in result.models:
            for word in result.words(model, domain):
                index.setdefault(word.domain, set()).add(word.word)
        return {
            "coverage": result.report["coverage"],
            "sources": result.sources.sources,
            "versions": result.report["detector_versions"],
            "thresholds": result.thresholds,
            "tables": {key: build(result, domain) for key, build in self.builders.items()},
            "domains": domains,
            "word_index": {name: sorted(words, key=str.lower) for name, words in index.items()},
            "samples": result.report["samples"],
            "validation_overall": result.report["validation_overall"],
        }

    def table(self, name: str, page: ReportPage) -> Table:
        """``Analysis.table`` of the page's domain (category) when one is chosen."""
        if name not in self.builders:
            raise UnknownTable(f"No table {name!r}.")
        return self.builders[name](self.page_result(page), page.scope.category)

    def draw(self, name: str, fmt: str, page: ReportPage, *, source: str = "") -> bytes:
        """Figure 4: the word scores of the page's T2I model and domain (category), each sorted;
        without those filters the report's first model and that model's first domain."""
        from protocols.pair_change import charts

        result = cast("PairChangeReport", self.page_result(page))
        model = page.scope.t2i_model or next(iter(result.models), "")
        domains = list(result.results[model].domains) if model in result.results else []
        domain = page.scope.category or (domains[0] if domains else "")
        title = f"Word scores: {model or 'no model'}, {domain or 'no domain'}"
        return charts.word_score_chart(charts.chart_panels(result, model, domain), fmt, title=title)

    def summary(self, result: PairChangeReport) -> str:
        versions = result.report["detector_versions"]
        sources = ", ".join(
            f"{attribute} by {name}@{versions[name]}" if name else f"{attribute} by none"
            for attribute, name in result.sources.sources.items()
        )
        cover = result.report["coverage"]
        return (
            f"Measured: {sources}. Thresholds: age {result.thresholds.age:g} years, skin "
            f"{result.thresholds.skin:g} gray levels. Pairs: {cover['pairs']}, scored: "
            f"{cover['pairs_scored']}, left out: {cover['pairs_left_out']}."
        )
