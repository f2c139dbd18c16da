"""Which protocol's numbers the few-label estimate knows how to estimate (issue 21).

The commands, the API and the page ask this registry, never a protocol's name: a protocol
whose headline numbers can be estimated registers an ``EstimandProtocol`` once, saying which
detector output kind the estimate reads, which designs it supports, which items count as
labelled (all the final labels its estimate reads exist) and how to build its report. A study
of an unregistered protocol gets a clear refusal that lists the registered ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

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
    estimate (raises LookupError when the detector has no predictions of ``output_kind``)."""

    key: str
    output_kind: str
    designs: tuple[str, ...]
    report: Callable[..., Report]
    labelled: Callable[[Study], frozenset[int]] | None = None


ESTIMANDS: dict[str, EstimandProtocol] = {}


def register(spec: EstimandProtocol) -> EstimandProtocol:
    """Register ``spec`` for its protocol key (once; a second registration is a bug)."""
    if spec.key in ESTIMANDS:
        raise ValueError(f"protocol '{spec.key}' already has a few-label estimate registered")
    ESTIMANDS[spec.key] = spec
    return spec


def for_protocol(protocol: str) -> EstimandProtocol | None:
    _load()
    return ESTIMANDS.get(protocol)


def known() -> list[str]:
    _load()
    return sorted(ESTIMANDS)


def _load() -> None:
    # The registrations live with each estimate (they import Django models): imported on
    # first use, not when this module is.
    from estimates import attributes, gender  # noqa: F401
