"""The object co-occurrence report as a plain dict (keys: docs/reference/contracts.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from metrics.objects import (
    GENDERS,
    HumanCheckClass,
    ImageObjects,
    JudgedImage,
    ObjectAnalysis,
    analyse_confirmed_objects,
    analyse_objects,
    human_check_of_images,
)
from protocols.objects import selectors as osel
from reports.selectors import LeftOut, Scope, left_out_coverage

#: ``Study.parameters`` key: whether the report counts ``person`` (default true, as the paper does).
INCLUDE_PERSON = "include_person"


@dataclass(frozen=True)
class ModelResult:
    """One T2I model: the detector's table with and without ``person``, and the confirmed boxes'
    analysis and per-class human check of the checked images (None when none)."""

    with_person: ObjectAnalysis
    without_person: ObjectAnalysis
    confirmed: ObjectAnalysis | None
    human: dict[str, HumanCheckClass] | None
    n_checked: int

    def detections(self, include_person: bool) -> ObjectAnalysis:
        return self.with_person if include_person else self.without_person


@dataclass(frozen=True)
class ObjectsResult:
    """A computed report with what its pages need besides the JSON."""

    report: dict[str, Any]
    detector: str
    version: str
    include_person: bool
    models: dict[str, ModelResult]

    def analysis(self, model: str) -> ObjectAnalysis:
        """The reported analysis of ``model`` (person counted or not, as the report says)."""
        return self.models[model].detections(self.include_person)


def include_person_default(scope: Scope) -> bool:
    """The study's choice (``parameters["include_person"]``), true unless it says otherwise."""
    value = (scope.study.parameters or {}).get(INCLUDE_PERSON, True)
    return value is not False and str(value).strip().lower() not in ("false", "0", "no")


def compute(
    scope: Scope,
    *,
    detector: str | None = None,
    include_person: bool | None = None,
    seed: int = 0,
) -> ObjectsResult:
    """The report of the items in scope (T2I model filter applied, category not);
    docs/explanation/protocols.md says what counts."""
    include = include_person_default(scope) if include_person is None else include_person
    name, version = osel.choose_detector(scope, detector)
    rows = osel.object_rows(scope, detector=name, version=version)
    left_out: list[LeftOut] = []
    not_counted: Counter[str] = Counter()
    images: dict[str, list[ImageObjects]] = {}
    judged: dict[str, list[JudgedImage]] = {}
    for row in rows:
        if row.gender not in GENDERS:
            shown = f"metadata gender {row.gender!r}" if row.gender else "no metadata gender"
            left_out.append(LeftOut(row.item_id, row.key, row.t2i_model, f"{shown} (male or female needed)"))
            continue
        if row.detected is None:
            reason = f"no ok prediction of {name}@{version} on its image"
            left_out.append(LeftOut(row.item_id, row.key, row.t2i_model, reason))
            continue
        images.setdefault(row.t2i_model, []).append(
            ImageObjects(row.gender, row.detected, row.gender_word, row.pair_id)
        )
        if row.final_boxes is None:
            continue
        parts = osel.judged_parts(row)
        if parts is None:
            not_counted["its box answer does not fit its boxes (or it has none)"] += 1
        elif row.boxes_detector != name:
            not_counted[f"its boxes came from {row.boxes_source or 'elsewhere'}, not {name}"] += 1
        else:
            confirmed, rejected, missed = parts
            judged.setdefault(row.t2i_model, []).append(
                JudgedImage(row.gender, confirmed, rejected, missed, row.gender_word, row.pair_id)
            )
    models: dict[str, ModelResult] = {}
    entries: dict[str, Any] = {}
    for model in sorted(images):
        checked = judged.get(model, [])
        result = ModelResult(
            with_person=analyse_objects(images[model], include_person=True, seed=seed),
            without_person=analyse_objects(images[model], include_person=False, seed=seed),
            confirmed=analyse_confirmed_objects(checked, include_person=include, seed=seed)
            if checked
            else None,
            human=human_check_of_images(checked) if checked else None,
            n_checked=len(checked),
        )
        models[model] = result
        entries[model] = {
            "detector": name,
            **result.detections(include).as_json(result.human),
            "detector_version": version,
            "n_checked": result.n_checked,
            "confirmed": None
            if result.confirmed is None
            else {k: v for k, v in result.confirmed.as_json(None).items() if k != "human_check"},
        }
    report = {
        "objects": entries,
        "detector": name,
        "detector_version": version,
        "includes_person": include,
        "coverage": left_out_coverage(sum(len(v) for v in images.values()), left_out)
        | {
            "items_checked": sum(len(v) for v in judged.values()),
            "checks_not_counted": dict(not_counted.most_common()),
        },
    }
    return ObjectsResult(
        report=report,
        detector=name,
        version=version,
        include_person=include,
        models=models,
    )
