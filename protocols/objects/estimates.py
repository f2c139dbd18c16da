"""The objects protocol's few-label estimate: per T2I model, the instances people confirm per
class and gender, and Cramér's V of that table (docs/explanation/protocols.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import Any

import numpy as np

from annotate.models import FinalLabel
from detectors.kinds import KIND_OBJECTS
from estimates.estimands import EstimandProtocol
from estimates.report import EstimateReport, drawn_arrays, drawn_frame, estimand_figures
from estimates.selectors import item_outputs as _outputs
from metrics import ppi_mean
from metrics.coco_names import UnknownClassName, coco_class_index, normalise_class_name
from metrics.objects import GENDERS, PERSON
from protocols.objects import selectors as osel
from protocols.objects.report import include_person_default
from reports.selectors import Scope
from studies.models import Study


def items_box_checked(study: Study) -> frozenset[int]:
    """Items whose box question has a final answer: what the objects estimate reads."""
    return frozenset(
        FinalLabel.objects.filter(item__study=study, question__key=osel.BOXES_QUESTION).values_list(
            "item_id", flat=True
        )
    )


def _name(raw: str) -> str | None:
    try:
        return normalise_class_name(raw)
    except UnknownClassName:
        return None


class ObjectsEstimateReport(EstimateReport):
    CELLS_KEY = "objects"
    KEYS = ("t2i_model", "estimand", "class", "gender")
    TABLE_KEY = "objects_estimate"
    TITLE = "Confirmed objects estimated from {detector}@{version} and sampled box checks"
    CAPTION = (
        "Per T2I model, the object instances people confirm per class and gender over every image, and "
        "Cramér's V of that table. Estimate: the detector's counts on every image corrected by the box "
        "checks of the sampled images, weighted by λ (0: the checks alone, 1: the detector's full weight; "
        "chosen from the data). Labels only: the sampled checks alone. Effective labels: how many checks "
        "alone would give the same precision."
    )

    @classmethod
    def headline(cls, cells: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {f"{model} Cramér's V": cell["confirmed"]["cramers_v"] for model, cell in cells.items()}

    def rows(self) -> list[list[Any]]:
        out = []
        for model, cell in self.cells.items():
            confirmed = cell["confirmed"]
            out.append([model, "cramers_v", "", "", *estimand_figures(confirmed["cramers_v"], cell)])
            for name, by_gender in confirmed["counts"].items():
                for gender, est in by_gender.items():
                    out.append([model, "count", name, gender, *estimand_figures(est, cell)])
        return out


def objects_report(
    study: Study, detector: str, *, n_boot: int = 0, seed: int = 0, history: bool = False
) -> ObjectsEstimateReport:
    """Confirmed instances per class and gender and Cramér's V per T2I model; LookupError when
    the detector has no ``objects`` predictions in the study."""
    start = drawn_frame(ESTIMAND, study, detector, "check its boxes")
    version, warnings = start.version, start.warnings
    include = include_person_default(Scope(study))
    in_frame = {i.item_id for i in start.frame.items}
    rows = [
        r
        for r in osel.object_rows(Scope(study), detector=detector, version=version)
        if r.item_id in in_frame and r.gender in GENDERS and r.detected is not None
    ]
    left_out = len(in_frame) - len(rows)
    if left_out:
        warnings.append(
            f"{left_out} item(s) without a male or female gender or an ok prediction of {detector}@{version} "
            "are left out, as in the report."
        )
    unreadable: set[int] = set()

    def cells_for(pi: dict[int, float], drawn: set[int]) -> dict[str, Any]:
        return _cells(rows, detector, include, pi, drawn, unreadable, seed)

    cells = cells_for(start.pi, start.drawn)
    if unreadable:
        warnings.append(
            f"{len(unreadable)} drawn item(s) have a box answer that does not fit their boxes, or boxes of "
            f"another detector than {detector}: they are not counted as labelled."
        )
    return ObjectsEstimateReport.of_frame(start, cells, cells_for, history=history)


def _cells(
    rows: list[osel.ObjectRow],
    detector: str,
    include: bool,
    pi: dict[int, float],
    drawn: set[int],
    unreadable: set[int],
    seed: int,
) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for model in sorted({r.t2i_model for r in rows}):
        mine = [r for r in rows if r.t2i_model == model]
        detected = [[n for n in map(_name, r.detected or ()) if n] for r in mine]
        confirmed: list[list[str] | None] = []
        for r in mine:
            parts = osel.judged_parts(r) if r.item_id in drawn and r.boxes_detector == detector else None
            if r.item_id in drawn and parts is None:
                unreadable.add(r.item_id)
            confirmed.append(None if parts is None else [n for n in map(_name, parts[0]) if n])
        names = {n for d in detected for n in d} | {n for c in confirmed if c for n in c}
        if not include:
            names.discard(PERSON)
        classes = sorted(names, key=coco_class_index)
        if not classes:
            continue
        # Instances per item and class: found by the detector, and confirmed by people (NaN: not checked).
        f = np.array([[d.count(name) for name in classes] for d in detected], dtype=float)
        y = np.array(
            [
                [np.nan] * len(classes) if c is None else [c.count(name) for name in classes]
                for c in confirmed
            ],
            dtype=float,
        )
        p, sampled = drawn_arrays((r.item_id for r in mine), pi, drawn)
        xi = sampled & ~np.isnan(y[:, 0])
        gender = np.array([GENDERS.index(r.gender) for r in mine])
        if len(set(gender)) < 2:
            continue
        v, _, table = ppi_mean.estimate_table(gender, f, y, xi, p, seed=seed)
        cells[model] = {
            "confirmed": {
                "counts": {
                    name: {g: table[k][j].as_json() for k, g in enumerate(GENDERS)}
                    for j, name in enumerate(classes)
                },
                "cramers_v": v.as_json(),
            },
            "n_items": len(mine),
            "n_labelled": int(xi.sum()),
        }
    return cells


def object_output_codes(study: Study, detector: str, version: str) -> dict[int, Hashable]:
    """item id -> how many instances the detector found (0, 1, 2, 3+): the stratified and active designs'
    detector output."""
    return {
        item_id: min(3, len((output or {}).get("objects") or []))
        for item_id, output in _outputs(study, detector, version, KIND_OBJECTS)
    }


def object_residuals(study: Study, detector: str, version: str) -> dict[int, float]:
    """item id -> Σ over classes of (detected - confirmed)² (checked items whose boxes came from
    this detector): the stratified and active designs' error spread."""
    out: dict[int, float] = {}
    for row in osel.object_rows(Scope(study), detector=detector, version=version):
        parts = osel.judged_parts(row) if row.boxes_detector == detector else None
        if parts is None or row.detected is None:
            continue
        diff = Counter(row.detected)
        diff.subtract(parts[0])
        out[row.item_id] = float(sum(d * d for d in diff.values()))
    return out


ESTIMAND = EstimandProtocol(
    key="objects",
    output_kind=KIND_OBJECTS,
    report=objects_report,
    labelled=items_box_checked,
    output_codes=object_output_codes,
    residuals=object_residuals,
)
