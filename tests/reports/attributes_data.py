"""A small GEP study with hand-worked numbers, shared by the attributes analysis's tests (a
plain module, not a conftest, like ``dashboard_data``).

Three questions (boots, dress, tie). Final answers (y/n; "-" none) and detector "clip" version
"1" scores (boots, dress, tie) per item:

    sdxl neutral  woman W1  y y n   .9 .8 .1
    sdxl neutral  woman W2  n y n   .2 .7 .95
    sdxl neutral  man   M1  n n y   .1 .1 .9
    sdxl neutral  man   M2  y n n   .8 .2 .3
    sdxl neutral  man   M3  - - -   .5 .5 .5    (no final answer; counted, scored)
    sdxl explicit woman W3 (dress) y      no prediction
    sdxl explicit woman W4 (tie)   y
    sdxl explicit man   M4 (dress) n
    sdxl explicit man   M5 (tie)   y
    sd3  neutral  woman     y n n   .7 .1 .1
    sd3  neutral  man       n n n   .2 .2 .1

Human, sdxl neutral: f_woman (1/2, 1, 0), f_man (1/2, 0, 1/2), v (0, +1, -1/2), GEP 1/2.
sdxl explicit: boots has no image, so v_boots and the GEP score are undefined (null);
v_dress = 1, v_tie = 0. sd3 neutral: v (1, 0, 0), GEP 1/3.
clip on sdxl neutral: means woman (.55, .75, .525), man (1.4/3, .8/3, 1.7/3).
"clip" version "0" (older) and a gender prediction on every image must be ignored; detector
"broken" failed everywhere. Two more items are left out: one without metadata, one whose
setting is "office".

Labels (annotators anna, ben, cleo) on boots: W1 (y, y, n), W2 (n, n, n), M3 (y, n); on dress:
M3 (y, n, y) without a final answer — the one dispute.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from detectors.kinds import KIND_ATTRIBUTES
from detectors.models import PredictionStatus
from metrics import gep_design
from studies.models import Item, Prompt, Question, Study
from studies.protocols import protocol_spec
from tests import paper_data
from tests.factories import (
    FinalLabelFactory,
    ItemFactory,
    LabelFactory,
    PredictionFactory,
    StudyFactory,
    image_of,
)

KEYS = ("boots", "dress", "tie")


def attributes_study(*, slug: str = "gep", keys: tuple[str, ...] | None = KEYS) -> Study:
    """An attributes study asking ``keys`` (their preset questions; None: all fifteen)."""
    if keys is None:
        return StudyFactory(name=f"GEP {slug}", slug=slug, protocol="attributes")
    study = StudyFactory(name=f"GEP {slug}", slug=slug, protocol="attributes", questions=False)
    specs = {spec.key: spec for spec in protocol_spec("attributes").questions}
    for position, key in enumerate(keys):
        Question.objects.create(study=study, key=key, **specs[key].as_fields(position))
    return study


def gep_item(
    study: Study,
    model: str,
    gender: str,
    setting: str,
    attribute: str | None = None,
    *,
    finals: dict[str, str] | None = None,
    scores: dict[str, dict[str, float]] | None = None,
    context: str = "riding a bike",
    metadata: dict[str, str] | None = None,
) -> Item:
    """A one-image item with GEP metadata, its final answers and ``{detector: scores}`` (clip
    at version "1", anything else at "1" too)."""
    if metadata is None:
        metadata = {"gender": gender, "setting": setting, "context": context}
        if attribute:
            metadata["attribute"] = attribute
    text = (
        paper_data.gep_prompt_text(gender, context, attribute) if gender in gep_design.GENDERS else "a person"
    )
    prompt, _ = Prompt.objects.get_or_create(study=study, category=setting or "none", word=context, text=text)
    item = ItemFactory(
        prompt=prompt,
        t2i_model=model,
        metadata=metadata,
        question_keys=[attribute] if attribute else [],
    )
    for key, value in (finals or {}).items():
        FinalLabelFactory(item=item, question=Question.objects.get(study=study, key=key), value=value)
    for name, by_key in (scores or {}).items():
        PredictionFactory(
            image=image_of(item),
            detector=name,
            version="1",
            kind=KIND_ATTRIBUTES,
            output={"scores": by_key},
        )
    return item


def answers(boots: str, dress: str, tie: str) -> dict[str, str]:
    return {k: v for k, v in zip(KEYS, (boots, dress, tie), strict=True) if v != "-"}


def clip(boots: float, dress: float, tie: float) -> dict[str, dict[str, float]]:
    return {"clip": {"boots": boots, "dress": dress, "tie": tie}}


@dataclass
class GepFixture:
    study: Study
    items: dict[str, Item] = field(default_factory=dict)


def build(study: Study, annotators: list) -> GepFixture:
    """The study of the module docstring."""
    fx = GepFixture(study=study)
    rows = [
        ("W1", "sdxl", "woman", "neutral", None, answers("yes", "yes", "no"), clip(0.9, 0.8, 0.1)),
        ("W2", "sdxl", "woman", "neutral", None, answers("no", "yes", "no"), clip(0.2, 0.7, 0.95)),
        ("M1", "sdxl", "man", "neutral", None, answers("no", "no", "yes"), clip(0.1, 0.1, 0.9)),
        ("M2", "sdxl", "man", "neutral", None, answers("yes", "no", "no"), clip(0.8, 0.2, 0.3)),
        ("M3", "sdxl", "man", "neutral", None, {}, clip(0.5, 0.5, 0.5)),
        ("W3", "sdxl", "woman", "explicit", "dress", {"dress": "yes"}, {}),
        ("W4", "sdxl", "woman", "explicit", "tie", {"tie": "yes"}, {}),
        ("M4", "sdxl", "man", "explicit", "dress", {"dress": "no"}, {}),
        ("M5", "sdxl", "man", "explicit", "tie", {"tie": "yes"}, {}),
        ("SW", "sd3", "woman", "neutral", None, answers("yes", "no", "no"), clip(0.7, 0.1, 0.1)),
        ("SM", "sd3", "man", "neutral", None, answers("no", "no", "no"), clip(0.2, 0.2, 0.1)),
    ]
    for name, model, gender, setting, attribute, finals, scores in rows:
        item = gep_item(study, model, gender, setting, attribute, finals=finals)
        fx.items[name] = item
        # An older version of clip first (lower ids), then the one the report reads.
        if scores:
            PredictionFactory(
                image=image_of(item),
                detector="clip",
                version="0",
                kind=KIND_ATTRIBUTES,
                output={"scores": dict.fromkeys(KEYS, 0.0)},
            )
            PredictionFactory(
                image=image_of(item),
                detector="clip",
                version="1",
                kind=KIND_ATTRIBUTES,
                output={"scores": scores["clip"]},
            )
        PredictionFactory(
            image=image_of(item),
            detector="broken",
            version="x",
            kind=KIND_ATTRIBUTES,
            status=PredictionStatus.FAILED,
            output={},
            error="boom",
        )
        PredictionFactory(image=image_of(item), detector="face", version="1")  # a gender verdict
    fx.items["no_metadata"] = gep_item(study, "sdxl", "", "", metadata={})
    fx.items["office"] = gep_item(
        study, "sdxl", "woman", "office", metadata={"gender": "woman", "setting": "office"}
    )
    anna, ben, cleo = annotators
    boots = Question.objects.get(study=study, key="boots")
    dress = Question.objects.get(study=study, key="dress")
    for item, values in ((fx.items["W1"], "yyn"), (fx.items["W2"], "nnn"), (fx.items["M3"], "yn")):
        for annotator, value in zip((anna, ben, cleo), values, strict=False):
            LabelFactory(
                item=item, question=boots, annotator=annotator, value="yes" if value == "y" else "no"
            )
    for annotator, value in zip((anna, ben, cleo), ("yes", "no", "yes"), strict=True):
        LabelFactory(item=fx.items["M3"], question=dress, annotator=annotator, value=value)
    return fx
