"""Reads of the object co-occurrence analysis, as plain data for ``metrics.objects``."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import F

from detectors.kinds import KIND_OBJECTS
from detectors.models import PredictionStatus
from metrics.objects import GENDERS
from protocols.objects.kinds import BOXES_KEY
from protocols.objects.services import BOXES_SOURCE_KEY
from reports.analyses import AnalysisError
from reports.selectors import (
    PREDICTION_TO_ITEM,
    Scope,
    final_answers,
    latest_detector_versions,
    predictions_in_scope,
)
from studies.models import ImageRole, ItemImage

KINDS = (KIND_OBJECTS,)
#: The preset's questions (``protocols.objects.spec.OBJECT_QUESTIONS``) and their answers per box.
BOXES_QUESTION = "boxes"
MISSED_QUESTION = "missed"
CONFIRMED = "yes"
REJECTED = "no"
#: The adult/child side of a gender word of the mannering2023 prompt set: a man and a woman (a
#: boy and a girl) of the same template and image index share a seed (``--seed-by template``).
AGE_GROUPS: Mapping[str, str] = {"man": "adult", "woman": "adult", "boy": "child", "girl": "child"}


@dataclass(frozen=True)
class ObjectRow:
    """One item as the analysis reads it; None where its metadata, prediction or final answer
    is missing."""

    item_id: int
    key: str
    t2i_model: str
    gender: str
    gender_word: str | None
    pair_id: Hashable | None
    #: The detector's instances (``{"class", "confidence", "box"}``); None without an ok prediction.
    instances: list[dict[str, Any]] | None
    boxes: tuple[str, ...] | None
    boxes_source: str
    final_boxes: str | None
    final_missed: str | None

    @property
    def detected(self) -> tuple[str, ...] | None:
        """The class of each of the detector's instances."""
        return None if self.instances is None else tuple(str(i.get("class", "")) for i in self.instances)

    @property
    def boxes_detector(self) -> str:
        """The detector name of ``boxes_source`` ("" when the item carries no source)."""
        return self.boxes_source.split("@", 1)[0]


def choose_detector(scope: Scope, detector: str | None) -> tuple[str, str]:
    """(detector, version) the report reads: ``detector`` when given, else the study's only
    objects detector. AnalysisError, with what to do, when the named detector has no objects
    prediction in scope, when there is none at all, or when there are several and none is named."""
    # The latest version of each detector's objects predictions in scope (category filter not applied).
    versions = latest_detector_versions(Scope(scope.study, t2i_model=scope.t2i_model), kinds=KINDS)
    study = scope.study.slug
    known = ", ".join(versions) or "none"
    if detector:
        if detector not in versions:
            raise AnalysisError(
                f"Detector '{detector}' has no objects prediction on the images of study '{study}' "
                f"(objects detectors: {known})."
            )
        return detector, versions[detector]
    if not versions:
        raise AnalysisError(
            f"No detector has found objects on the images of study '{study}' yet: run "
            f"run_detectors --detector yolo_objects --study {study}."
        )
    if len(versions) > 1:
        raise AnalysisError(
            f"Study '{study}' has objects predictions of several detectors ({known}): choose one "
            "with --detector (bias_report) or the detector filter (?detector=)."
        )
    [(name, version)] = versions.items()
    return name, version


def pair_id(metadata: Mapping[str, Any], index: int | None) -> Hashable | None:
    """(template, image index, adult|child) of a mannering2023 item; None when the template,
    the index or the age group (``metadata["age_group"]``, else from the gender word) is missing."""
    template = str(metadata.get("template", "")).strip()
    word = str(metadata.get("gender_word", "")).strip().lower()
    group = str(metadata.get("age_group", "")).strip() or AGE_GROUPS.get(word, "")
    if not template or index is None or not group:
        return None
    return (template, index, group)


def _box_classes(metadata: Mapping[str, Any]) -> tuple[str, ...] | None:
    boxes = metadata.get(BOXES_KEY)
    if not isinstance(boxes, list):
        return None
    return tuple(str(box.get("class", "")) if isinstance(box, Mapping) else "" for box in boxes)


def object_rows(scope: Scope, *, detector: str, version: str) -> list[ObjectRow]:
    """Every item in scope (its T2I model filter applied, its category not), by T2I model and
    id, with what ``ObjectRow`` holds; the detector's classes from its ``version``."""
    scope = Scope(scope.study, t2i_model=scope.t2i_model)
    outputs: dict[int, Any] = dict(  # item id -> the detector's ok ``objects`` output at ``version``
        predictions_in_scope(scope, kinds=KINDS, detector=detector)
        .filter(version=version, status=PredictionStatus.OK)
        .values_list(F(f"{PREDICTION_TO_ITEM}id"), "output")
        .order_by()
    )
    finals = final_answers(scope, [BOXES_QUESTION, MISSED_QUESTION])
    rows = []
    for item_id, key, model, index, metadata in (
        scope.items().order_by("t2i_model", "id").values_list("id", "key", "t2i_model", "index", "metadata")
    ):
        metadata = metadata if isinstance(metadata, dict) else {}
        answers = finals.get(item_id, {})
        rows.append(
            ObjectRow(
                item_id=item_id,
                key=key,
                t2i_model=model,
                gender=str(metadata.get("gender", "")).strip(),
                gender_word=str(metadata.get("gender_word", "")).strip() or None,
                pair_id=pair_id(metadata, index),
                instances=list((outputs[item_id] or {}).get("objects") or []) if item_id in outputs else None,
                boxes=_box_classes(metadata),
                boxes_source=str(metadata.get(BOXES_SOURCE_KEY, "")),
                final_boxes=answers.get(BOXES_QUESTION),
                final_missed=answers.get(MISSED_QUESTION),
            )
        )
    return rows


@dataclass(frozen=True)
class ClassItem:
    """One image of a class's drill-down: the detector's instances, how many are of the class, and
    what people said about its boxes (None when not checked)."""

    item_id: int
    key: str
    t2i_model: str
    gender: str
    gender_word: str
    image: Any
    instances: list[dict[str, Any]]
    n_class: int
    checked: tuple[str, ...] | None
    missed: int | None


def class_items(scope: Scope, *, name: str, detector: str, version: str) -> list[ClassItem]:
    """The male and female items in scope where the detector found ``name`` or people said it
    missed one, by T2I model, gender, then most instances first."""
    scope = Scope(scope.study, t2i_model=scope.t2i_model)
    rows_by_id = {row.item_id: row for row in object_rows(scope, detector=detector, version=version)}
    wanted: list[ClassItem] = []
    links = {
        link.item_id: link
        for link in ItemImage.objects.filter(item__in=scope.items(), role=ImageRole.IMAGE).select_related(
            "image"
        )
    }
    for item_id, row in rows_by_id.items():
        if row.gender not in GENDERS:
            continue
        instances = row.instances or []
        n_class = sum(1 for instance in instances if instance.get("class") == name)
        checked, missed = _human_view(row, name, detector)
        if not n_class and not missed:
            continue
        wanted.append(
            ClassItem(
                item_id=item_id,
                key=row.key,
                t2i_model=row.t2i_model,
                gender=row.gender,
                gender_word=row.gender_word or "",
                image=links[item_id].image if item_id in links else None,
                instances=instances,
                n_class=n_class,
                checked=checked,
                missed=missed,
            )
        )
    wanted.sort(key=lambda r: (r.t2i_model, GENDERS.index(r.gender), -r.n_class, r.item_id))
    return wanted


def _human_view(row: ObjectRow, name: str, detector: str) -> tuple[tuple[str, ...] | None, int | None]:
    """Final answers to the boxes of class ``name`` and the number of ``name`` objects said
    missed, when people checked this detector's boxes on the item; (None, None) otherwise."""
    parts = judged_parts(row) if row.boxes_detector == detector else None
    if parts is None or row.boxes is None or row.final_boxes is None:
        return None, None
    answers = row.final_boxes.split(",") if row.final_boxes else []
    checked = tuple(a for cls, a in zip(row.boxes, answers, strict=True) if cls == name)
    return checked, parts[2].count(name)


def judged_parts(row: ObjectRow) -> tuple[list[str], list[str], list[str]] | None:
    """(confirmed, rejected, missed) class names of a checked item, or None when the item was
    not checked (no boxes, no final box answer) or its answer does not fit its boxes."""
    if row.boxes is None or row.final_boxes is None:
        return None
    answers = row.final_boxes.split(",") if row.final_boxes else []
    if len(answers) != len(row.boxes):
        return None
    confirmed = [cls for cls, a in zip(row.boxes, answers, strict=True) if a == CONFIRMED]
    rejected = [cls for cls, a in zip(row.boxes, answers, strict=True) if a == REJECTED]
    missed = [m for m in (row.final_missed or "").split(",") if m.strip()]
    return confirmed, rejected, missed
