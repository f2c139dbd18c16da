"""Analyses: what a report is, per study protocol (docs/explanation/reports.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import Any, ClassVar, Protocol, TypeVar
from urllib.parse import urlencode

from django.urls import reverse

from reports import render
from reports.charts import UnknownChart
from reports.selectors import Scope
from reports.tables import Table, UnknownTable
from studies.models import Study
from studies.protocols import SpecPaths, protocol_spec, protocols_changed

#: Protocol key -> dotted path of its Analysis class, as each registered protocol's spec declares
#: it (``ProtocolSpec.analysis``; a protocol without one has no report yet).
ANALYSES: MutableMapping[str, str] = SpecPaths("analysis")

T = TypeVar("T")


@dataclass(frozen=True)
class ReportOption:
    """An option an analysis adds to ``bias_report``, the ``compute`` ``keyword`` it sets."""

    flag: str
    help: str
    keyword: str
    studies: str
    value: Any = None


@dataclass(frozen=True)
class NavLink:
    """A link an analysis adds to the report pages' navigation (current on ``page_name``)."""

    url_name: str
    label: str
    page_name: str


#: The estimate page (``estimates``), in the navigation of every protocol that has an estimate.
ESTIMATE_LINK = NavLink(url_name="estimates:page", label="Estimate from few labels", page_name="estimate")


class NoAnalysis(LookupError):
    """The study's protocol has no analysis (yet)."""


class AnalysisError(ValueError):
    """The study cannot be analysed as it stands; the message says what to change."""


class FilterNeeded(ValueError):
    """A table or chart needs a filter the request lacks; the message says which."""


class ReportPage(Protocol):
    """What a dashboard request gives an analysis: its scope, the detector filter, cached computations."""

    @property
    def scope(self) -> Scope: ...

    @property
    def detector(self) -> str | None: ...

    def result(self, *, bootstrap: int) -> Any:
        """``analysis.compute`` for this page's filters, cached."""

    def cached(self, kind: str, compute: Callable[[], T], **key: Any) -> T:
        """``compute()``, cached under ``kind`` and ``key`` besides the page's filters."""

    def params(self, **overrides: str | None) -> dict[str, str]:
        """The page's filters (with ``overrides``) as query parameters, empty ones left out."""

    def query(self, **overrides: str | None) -> str:
        """The filters as a query string, for links that keep them (downloads, drill-downs)."""


def chart_src(name: str, page: ReportPage, **extra: str) -> str:
    """URL of a chart drawn for display in the page (``chart_image``), with the page's filters."""
    query = urlencode(page.params() | extra)
    return reverse("reports:chart_image", args=[name, "svg"]) + (f"?{query}" if query else "")


def data_version(page: ReportPage) -> str:
    """A short digest of the page's data, carried by chart URLs so a changed chart gets a new URL."""
    fingerprint = getattr(page, "fingerprint", ())
    return hashlib.sha256(repr(fingerprint).encode()).hexdigest()[:12]


class Analysis:
    """The contract of one protocol's analysis (subclass it); its members are described in
    docs/explanation/reports.md."""

    protocol: ClassVar[str]
    title: ClassVar[str]
    template: ClassVar[str]
    table_keys: ClassVar[tuple[str, ...]] = ()
    csv_tables: ClassVar[tuple[str, ...]] = ()
    chart_keys: ClassVar[tuple[str, ...]] = ()
    pages: ClassVar[frozenset[str]] = frozenset()
    options: ClassVar[tuple[ReportOption, ...]] = ()
    nav: ClassVar[tuple[NavLink, ...]] = ()
    category_applies: ClassVar[bool] = False
    #: Table key -> its builder from ``compute``'s result (the default ``table`` and ``export``).
    builders: ClassVar[Mapping[str, Callable[..., Table]]] = {}
    #: Table key -> the paper's table it reproduces, named in the Markdown export.
    paper: ClassVar[Mapping[str, str]] = {}
    #: The report's name in the default ``export`` ("GEP": "# GEP report").
    report_name: ClassVar[str] = ""

    @property
    def nav_links(self) -> tuple[NavLink, ...]:
        """The navigation links of this analysis: its own, then the few-label estimate when it has one."""
        if not protocol_spec(self.protocol).estimates:
            return self.nav
        return (*self.nav, ESTIMATE_LINK)

    def check(self, study: Study) -> None:
        """Raise AnalysisError when ``study`` cannot be analysed; nothing otherwise."""

    def compute(
        self, scope: Scope, *, detector: str | None = None, bootstrap: int = 1000, seed: int = 0
    ) -> Any:
        raise NotImplementedError

    def build(
        self, scope: Scope, *, detector: str | None = None, bootstrap: int = 1000, seed: int = 0
    ) -> dict[str, Any]:
        """The JSON report of the study in ``scope``; ``bootstrap`` resamples per interval (0: none)."""
        return self.compute(scope, detector=detector, bootstrap=bootstrap, seed=seed).report

    def page_result(self, page: ReportPage) -> Any:
        """The page's computed result (no intervals) for a download; FilterNeeded when a filter is missing."""
        try:
            return page.result(bootstrap=0)
        except AnalysisError as error:
            raise FilterNeeded(str(error)) from error

    def overview(self, page: ReportPage) -> dict[str, Any]:
        raise NotImplementedError

    def tables(self, result: Any) -> dict[str, Table]:
        """Every table of ``builders`` from ``compute``'s result, by key."""
        return {key: build(result) for key, build in self.builders.items()}

    def table(self, name: str, page: ReportPage) -> Table:
        """A downloadable table (``builders``); UnknownTable for any other name, FilterNeeded
        when the report cannot be computed as the filters stand."""
        if name not in self.builders:
            raise UnknownTable(f"No table {name!r}.")
        return self.builders[name](self.page_result(page))

    def chart(self, name: str, fmt: str, page: ReportPage, *, source: str = "") -> bytes:
        """Chart ``name`` (``chart_keys``) as ``draw`` makes it, drawn once per filters and data."""
        if name not in self.chart_keys:
            raise UnknownChart(f"No chart {name!r}.")
        return page.cached(
            "chart", lambda: self.draw(name, fmt, page, source=source), name=name, fmt=fmt, source=source
        )

    def draw(self, name: str, fmt: str, page: ReportPage, *, source: str = "") -> bytes:
        raise NotImplementedError

    def summary(self, result: Any) -> str:
        """The line under the heading of the default ``export``."""
        raise NotImplementedError

    def export(self, result: Any, fmt: str) -> str:
        """The computed report (``compute``'s result) as ``bias_report --format csv`` or ``md``."""
        return render.export_tables(
            list(self.tables(result).values()),
            fmt,
            name=self.report_name,
            heading=[
                f"# {self.report_name[0].upper()}{self.report_name[1:]} report",
                "",
                self.summary(result),
            ],
            left_out=result.report["coverage"]["left_out_reasons"],
            paper=self.paper,
        )


@cache
def analysis_for(protocol: str) -> Analysis:
    """The analysis of a protocol, imported on first use; NoAnalysis when there is none."""
    try:
        dotted = ANALYSES[protocol]
    except KeyError:
        known = ", ".join(sorted(ANALYSES)) or "none"
        raise NoAnalysis(
            f"Studies of protocol '{protocol}' have no report yet (reports exist for: {known})."
        ) from None
    module_name, _, class_name = dotted.rpartition(".")
    return getattr(import_module(module_name), class_name)()


def _protocols_changed(**kwargs: Any) -> None:
    """A protocol registered or taken out: read the analysis classes again."""
    analysis_for.cache_clear()


protocols_changed.connect(_protocols_changed, dispatch_uid="reports.analyses.protocols_changed")


def report_options() -> dict[str, tuple[ReportOption, list[str]]]:
    """Every option the analyses add to ``bias_report``: flag -> (the option, its protocols)."""
    found: dict[str, tuple[ReportOption, list[str]]] = {}
    for protocol in ANALYSES:
        for option in analysis_for(protocol).options:
            found.setdefault(option.flag, (option, []))[1].append(protocol)
    return found


def analysis_of(study: Study) -> Analysis:
    """The analysis of the study's protocol (NoAnalysis / AnalysisError when it cannot be analysed)."""
    analysis = analysis_for(study.protocol)
    analysis.check(study)
    return analysis
