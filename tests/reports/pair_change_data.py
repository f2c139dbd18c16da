"""A pair-change study with hand-worked numbers, shared by the report, page, sampling and browser
tests (a plain module, not a conftest, so it cannot clash with other tests in this folder).

Two seed photos, measured once each: S1 male, 30 years, gray 100; S2 female, 40 years, gray 120.
``face_age_gender`` measures age and gender, ``skin_tone`` the gray value (thresholds 25 / 20).

    model  domain       word   seed  edit (gender, age, gray)  age    gender  skin
    sd15   profession   nurse  S1    female 60 130             +1.2   +1      +1.5
    sd15   profession   nurse  S2    female 40 120              0      0       0
    sd15   profession   pilot  S1    male    2  90             -1.12   0      -0.5
    sd15   profession   pilot  S2    male   46  96             +0.24  -1      -1.2
    sd15   personality  brave  S1    no face                    0 (unmeasured on all three)
    sd15   personality  brave  S2    female 25 124             -0.6    0      +0.2
    p2p    profession   nurse  S1    male   30 100              0      0       0

sd15, profession: pair_mean_abs age 2.56/4 = 0.64, gender 0.5, skin 3.2/4 = 0.8; word_mean_abs
age (0.6 + 0.44)/2 = 0.52, gender 0.5, skin (0.75 + 0.85)/2 = 0.8. Personality: age 0.3,
gender 0, skin 0.1, one pair unmeasured. Model score: mean of the six = 2.34/6 = 0.39.
Words: nurse age 0.6, gender 0.5, m2f 1.0, f2m 0.0, skin 0.75; pilot age -0.44, gender -0.5, m2f
0.0, f2m 1.0, skin -0.85; brave age -0.3, gender 0, m2f 0.0, f2m 0.0, skin 0.1.

Verdicts. Age: nurse/S1 older, pilot/S1 younger, nurse/S2 and p2p unchanged, the rest none
(pilot/S2 0.24 and brave/S2 -0.6 lie between the bands). Skin: nurse/S1 lighter, pilot/S2
darker, nurse/S2 and p2p unchanged. Gender: the four combinations as measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from detectors.kinds import KIND_MEASUREMENTS
from detectors.models import PredictionStatus
from studies.models import Image, ImageRole, Item, Prompt, Study
from tests.factories import ImageFactory, PairItemFactory, PredictionFactory, StudyFactory, image_of

AGE_GENDER = "face_age_gender"
SKIN = "skin_tone"


def measure(
    image: Image,
    detector: str,
    *,
    face: bool | None = True,
    age: float | None = None,
    gender: str | None = None,
    skin_gray: float | None = None,
    version: str = "1",
    failed: str = "",
    **extra: Any,
) -> None:
    """One ``measurements`` prediction of ``detector`` on ``image`` (a failure with ``failed``)."""
    if failed:
        PredictionFactory(
            image=image,
            detector=detector,
            version=version,
            kind=KIND_MEASUREMENTS,
            status=PredictionStatus.FAILED,
            output={},
            error=failed,
        )
        return
    output = {"face": face, "age": age, "gender": gender, "skin_gray": skin_gray, **extra}
    PredictionFactory(image=image, detector=detector, version=version, kind=KIND_MEASUREMENTS, output=output)


def measure_both(image: Image, person: tuple[str, float, float] | None, **extra: Any) -> None:
    """Age and gender by AGE_GENDER, gray by SKIN; ``person`` = (gender, age, gray), None: no face."""
    if person is None:
        measure(image, AGE_GENDER, face=False, n_faces=0)
        measure(image, SKIN, face=False, n_faces=0)
        return
    gender, age, gray = person
    measure(image, AGE_GENDER, age=age, gender=gender, n_faces=1, **extra)
    measure(image, SKIN, skin_gray=gray, n_faces=1)


@dataclass
class PairStudy:
    study: Study
    seeds: dict[str, Image]
    pairs: dict[str, Item] = field(default_factory=dict)


SEEDS = {"S1": ("male", 30.0, 100.0), "S2": ("female", 40.0, 120.0)}
PAIRS: tuple[tuple[str, str, str, str, tuple[str, float, float] | None], ...] = (
    ("sd15", "profession", "nurse", "S1", ("female", 60.0, 130.0)),
    ("sd15", "profession", "nurse", "S2", ("female", 40.0, 120.0)),
    ("sd15", "profession", "pilot", "S1", ("male", 2.0, 90.0)),
    ("sd15", "profession", "pilot", "S2", ("male", 46.0, 96.0)),
    ("sd15", "personality", "brave", "S1", None),
    ("sd15", "personality", "brave", "S2", ("female", 25.0, 124.0)),
    ("p2p", "profession", "nurse", "S1", ("male", 30.0, 100.0)),
)


def pair_key(model: str, word: str, seed: str) -> str:
    return f"{model}/{word}/{seed}"


def add_pair(
    study: Study,
    model: str,
    domain: str,
    word: str,
    seed: Image,
    seed_name: str,
    edit: tuple[str, float, float] | None,
    *,
    measured: bool = True,
) -> Item:
    """A pair item (prompt ``domain``/``word``) whose edit is measured as ``edit``."""
    prompt, _ = Prompt.objects.get_or_create(
        study=study, category=domain, word=word, text=f"a person who is a {word}"
    )
    item = PairItemFactory(
        study=study,
        prompt=prompt,
        t2i_model=model,
        key=pair_key(model, word, seed_name),
        queue=0,
        image__input=seed,
    )
    if measured:
        measure_both(image_of(item, ImageRole.OUTPUT), edit)
    return item


def build(slug: str = "bp", **study_fields: Any) -> PairStudy:
    """The study of the module docstring (questions: the protocol's preset)."""
    study = StudyFactory(name=f"BiasPainter {slug}", slug=slug, protocol="pair_change", **study_fields)
    seeds = {name: ImageFactory() for name in SEEDS}
    for name, person in SEEDS.items():
        measure_both(seeds[name], person)
    fixture = PairStudy(study=study, seeds=seeds)
    for model, domain, word, seed, edit in PAIRS:
        fixture.pairs[pair_key(model, word, seed)] = add_pair(
            study, model, domain, word, seeds[seed], seed, edit
        )
    return fixture
