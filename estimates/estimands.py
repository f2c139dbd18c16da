"""Which protocol's numbers the few-label estimate knows how to estimate (issue 21).

The commands, the API and the page ask this registry, never a protocol's name: a protocol
whose headline numbers can be estimated names, in its spec (``ProtocolSpec.estimates``), a module
whose ``ESTIMAND`` is an ``EstimandProtocol``, saying which
detector output kind the estimate reads, which designs it supports, which items count as
labelled (all the final labels its estimate reads exist) and how to build its report. A study
of an unregistered protocol gets a clear refusal that lists the registered ones.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from studies.protocols import SpecPaths

if TYPE_CHECKING:
    from studies.models import Study


class Report(Protocol):
    """What an estimate report offers the commands, the API and the page."""

    def as_json(self) -> dict[str, Any]: ...

    def api_json(self) -> dict[str, Any]: ...

    def markdown(self) -> str: ...

    def csv(self) -> str: ...

    def pending_messages(self) -> list[str]: ...

    @property
    def version(self) -> str: ...

    def page_context(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class EstimandProtocol:
    """A protocol's few-label estimate. ``labelled(study)`` gives the ids of the items whose
    final labels the estimate reads are all there, or None to use the gender frame's own
    reading of the ``gender`` question; ``report(study, detector, n_boot=, seed=)`` builds the
    estimate (raises LookupError when the detector has no predictions of ``output_kind``).
    ``output_codes(study, detector, version)`` (the stratified design of a protocol other than
    gender): item id -> a small code of the detector's output, the strata being T2I model x
    prompt x code; ``residuals(study, detector, version)``: item id -> the squared difference
    between the detector's output and the final labels, for the labelled items (the spread per
    code that Neyman allocation weighs)."""

    key: str
    output_kind: str
    designs: tuple[str, ...]
    report: Callable[..., Report]
    labelled: Callable[[Study], frozenset[int]] | None = None
    output_codes: Callable[[Study, str, str], dict[int, Hashable]] | None = None
    residuals: Callable[[Study, str, str], dict[int, float]] | None = None


#: protocol key -> the module whose ``ESTIMAND`` is its few-label estimate, as each registered
#: protocol's spec names it (``ProtocolSpec.estimates``), imported on first use.
ESTIMANDS: MutableMapping[str, str] = SpecPaths("estimates")


def for_protocol(protocol: str) -> EstimandProtocol | None:
    """The protocol's few-label estimate, or None when it has none."""
    path = ESTIMANDS.get(protocol)
    if path is None:
        return None
    spec = import_module(path).ESTIMAND
    if not isinstance(spec, EstimandProtocol) or spec.key != protocol:
        raise TypeError(f"{path}.ESTIMAND is not the few-label estimate of protocol '{protocol}'")
    return spec


def known() -> list[str]:
    return sorted(ESTIMANDS)
