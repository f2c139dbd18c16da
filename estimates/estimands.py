"""Which protocols' numbers the few-label estimate can estimate: the registry the commands, the API
and the page ask (a protocol's spec names a module whose ``ESTIMAND`` is an ``EstimandProtocol``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

from estimates.kept import Report
from estimates.models import Design
from studies.protocols import SpecPaths

if TYPE_CHECKING:
    import numpy as np

    from estimates.selectors import Frame
    from studies.models import Study


@dataclass(frozen=True)
class EstimandProtocol:
    """A protocol's few-label estimate; its fields are described in docs/how-to/add-protocol.md."""

    key: str
    output_kind: str
    report: Callable[..., Report]
    designs: tuple[str, ...] = tuple(Design.values)
    labelled: Callable[[Study], frozenset[int]] | None = None
    humans: Callable[[Study], dict[int, str]] | None = None
    verdicts: Callable[[Study, str, str], dict[int, str]] | None = None
    output_codes: Callable[[Study, str, str], dict[int, Hashable]] | None = None
    residuals: Callable[[Study, str, str], dict[int, float]] | None = None
    design_pi: Callable[[Frame, str, int, np.ndarray], np.ndarray] | None = None
    judge_kind: str | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The output kinds the estimate reads: ``output_kind``, then a judge's."""
        return (self.output_kind,) if self.judge_kind is None else (self.output_kind, self.judge_kind)


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


def not_estimable(study: Study) -> str:
    """Why ``study`` has no few-label estimate, naming the protocols that have one."""
    return (
        f"'{study.slug}' is a {study.get_protocol_display()} study; few-label estimates exist for "
        f"{', '.join(known())} studies"
    )


def series_of(spec: EstimandProtocol, study: Study, detector: str) -> tuple[str, str] | None:
    """(version, kind) of the detector's predictions the estimate reads (its last run); None without any."""
    from estimates.selectors import detector_version

    for kind in spec.kinds:
        version = detector_version(study, detector, kind)
        if version is not None:
            return version, kind
    return None


def detectors_of(spec: EstimandProtocol, study: Study) -> list[str]:
    """The detectors with predictions the estimate reads in the study, sorted."""
    from reports.selectors import Scope, detector_runs_in_scope

    return sorted({d for d, _, _ in detector_runs_in_scope(Scope(study), kinds=list(spec.kinds))})


def kinds_wording(spec: EstimandProtocol) -> str:
    """``attributes`` or ``attributes (or a judge's answers)``: what the messages name."""
    return (
        spec.output_kind
        if spec.judge_kind is None
        else f"{spec.output_kind} (or a judge's {spec.judge_kind})"
    )


def frame_of(spec: EstimandProtocol, study: Study, detector: str, version: str) -> Frame:
    """The sampling frame of the series (study, detector, version) as the protocol's estimate reads it."""
    from estimates.selectors import sampling_frame

    if spec.humans is not None:
        return sampling_frame(
            study,
            detector,
            version,
            humans=spec.humans(study),
            verdicts=spec.verdicts(study, detector, version) if spec.verdicts is not None else None,
        )
    labelled = spec.labelled(study) if spec.labelled is not None else frozenset()
    return sampling_frame(study, detector, version, labelled=labelled)
