"""A small fixture study with hand-counted numbers, shared by the dashboard's view and drill-down
tests (a plain module, not a conftest, so it cannot clash with other tests in this folder).

Items (T2I model, prompt, final label, verdict of detector "fake" version 2 on the item's image):

    1 sdxl lawyer        male         male                 agree
    2 sdxl lawyer        male         filtered (no_face)   false filter
    3 sdxl lawyer        female       male                 wrong gender
    4 sdxl lawyer        low_quality  male                 false keep
    5 sd3  lawyer        female       female               agree
    6 sd3  lawyer        female       female               agree
    7 sdxl R&D_lab 100%  low_quality  filtered (no_person) agree
    8 sdxl R&D_lab 100%  low_quality  filtered (no_person) agree
    9 sd3  R&D_lab 100%  male         male                 agree
   10 sd3  R&D_lab 100%  female       male                 wrong gender
   11 sdxl lawyer        (none: only anna labelled it)  male   not counted

Version "1" of "fake" says "female" everywhere and must be ignored (an older run). Detector
"facey" predicted images 1-4 only, and failed on image 5.

Hand counts for fake: TP 6, FN 1, FP 1, TN 2; gender male->male 2, female->male 2,
female->female 2; disagreements: false_keep 1, false_filter 1, wrong_gender 2, all 4.
Human prompt bias scores: sdxl lawyer (2-1)/3, sd3 lawyer -1, sdxl R&D none, sd3 R&D 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from annotate.models import FinalLabelSource
from detectors.models import Prediction, PredictionStatus
from studies.models import Item, Prompt, Study
from tests.factories import (
    FinalLabelFactory,
    ItemFactory,
    LabelFactory,
    PredictionFactory,
    PromptFactory,
    image_of,
)

ROWS = [
    ("sdxl", "lawyer", "male", "male", ""),
    ("sdxl", "lawyer", "male", "filtered", "no_face"),
    ("sdxl", "lawyer", "female", "male", ""),
    ("sdxl", "lawyer", "low_quality", "male", ""),
    ("sd3", "lawyer", "female", "female", ""),
    ("sd3", "lawyer", "female", "female", ""),
    ("sdxl", "rnd", "low_quality", "filtered", "no_person"),
    ("sdxl", "rnd", "low_quality", "filtered", "no_person"),
    ("sd3", "rnd", "male", "male", ""),
    ("sd3", "rnd", "female", "male", ""),
    ("sdxl", "lawyer", None, "male", ""),
]
RND_WORD = "R&D_lab 100%"


def output(label: str, reason: str = "") -> dict:
    """A gender prediction's output: verdict male / female / filtered and why it filtered."""
    return {"label": label, "reason": reason, "scores": {}}


def predict(
    item: Item, detector: str, version: str, label: str = "", *, failed: bool = False, reason: str = ""
):
    """A prediction of ``detector`` on the item's image file (a failure when ``failed``)."""
    if failed:
        return PredictionFactory(
            image=image_of(item),
            detector=detector,
            version=version,
            status=PredictionStatus.FAILED,
            output={},
            error="boom",
        )
    reason = reason or ("no_face" if label == "filtered" else "")
    return PredictionFactory(
        image=image_of(item), detector=detector, version=version, output=output(label, reason)
    )


@dataclass
class Fixture:
    study: Study
    lawyer: Prompt
    rnd: Prompt
    items: list[Item]


def build(study: Study, annotator_a, annotator_b) -> Fixture:
    lawyer = PromptFactory(study=study, category="profession", word="lawyer")
    rnd = PromptFactory(
        study=study, category="place", word=RND_WORD, text=f"a photo of one real person at the {RND_WORD}"
    )
    prompts = {"lawyer": lawyer, "rnd": rnd}
    old = timezone.now() - timedelta(days=1)
    items = []
    for index, (model, prompt, final, verdict, reason) in enumerate(ROWS):
        item = ItemFactory(prompt=prompts[prompt], t2i_model=model, index=index)
        items.append(item)
        if final is None:
            LabelFactory(item=item, annotator=annotator_a, value="male")
        else:
            LabelFactory(item=item, annotator=annotator_a, value=final)
            LabelFactory(item=item, annotator=annotator_b, value=final)
            FinalLabelFactory(item=item, value=final, source=FinalLabelSource.AGREED)
        # The older run first (lower ids, earlier time): "2" is the version run last.
        old_pred = predict(item, "fake", "1", "female")
        Prediction.objects.filter(pk=old_pred.pk).update(created_at=old)
        predict(item, "fake", "2", verdict, reason=reason)
    for item in items[:4]:
        predict(item, "facey", "a", "male")
    predict(items[4], "facey", "a", failed=True)
    return Fixture(study=study, lawyer=lawyer, rnd=rnd, items=items)


def detector_prompt_counts(scope, *, question, detectors=None):
    """(category, word, prompt, t2i_model, detector) -> (n_male, n_female, n_predicted) of the
    detector's verdicts on items with a final label, counted in SQL (the reference)."""
    from django.db.models import Count, F, Q

    from detectors.models import PredictionStatus
    from protocols.gender.selectors import CLEAR_VERDICTS, KINDS, with_final
    from reports import selectors as sel

    versions = sel.latest_detector_versions(scope, kinds=KINDS)
    if detectors is not None:
        versions = {k: v for k, v in versions.items() if k in detectors}
    if not versions:
        return {}
    predictions = with_final(sel.predictions_in_scope(scope, kinds=KINDS), question=question).filter(
        sel.of_versions(versions), status=PredictionStatus.OK, final_value__isnull=False
    )
    item = sel.PREDICTION_TO_ITEM
    rows = (
        predictions.values(
            "detector",
            t2i_model=F(f"{item}t2i_model"),
            category=F(f"{item}prompt__category"),
            word=F(f"{item}prompt__word"),
            text=F(f"{item}prompt__text"),
        )
        .annotate(
            n_male=Count("pk", filter=Q(output__label=CLEAR_VERDICTS[0])),
            n_female=Count("pk", filter=Q(output__label=CLEAR_VERDICTS[1])),
            n=Count("pk"),
        )
        .order_by()
    )
    return {
        (r["category"] or "", r["word"] or "", r["text"] or "", r["t2i_model"], r["detector"]): (
            r["n_male"],
            r["n_female"],
            r["n"],
        )
        for r in rows
    }
