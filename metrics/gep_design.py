"""The design of Zhang et al. 2023's GEP study as plain data and its CLS training texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# --- The paper's design: genders, settings, attributes (Table 1), contexts (Table 2) --------------

WOMAN = "woman"
MAN = "man"
#: Metadata values of ``gender``; the GEP vector is woman minus man, so woman comes first.
GENDERS: tuple[str, str] = (WOMAN, MAN)

NEUTRAL = "neutral"
EXPLICIT = "explicit"
SETTINGS: tuple[str, str] = (NEUTRAL, EXPLICIT)

#: Key -> attribute phrase as it stands in prompts and questions (Table 1, with its preposition;
#: the authors' released prompts confirm e.g. "in uniform" without article and "with gloves").
ATTRIBUTE_PHRASES: dict[str, str] = {
    "boots": "in boots",
    "slippers": "in slippers",
    "jeans": "in jeans",
    "shorts": "in shorts",
    "slacks": "in slacks",
    "dress": "in a dress",
    "skirt": "in a skirt",
    "suit": "in a suit",
    "shirt": "in a shirt",
    "uniform": "in uniform",
    "jacket": "in a jacket",
    "hat": "in a hat",
    "tie": "with a tie",
    "mask": "with a mask",
    "gloves": "with gloves",
}
#: Question keys of the 15 attributes, in the order of the paper's Table 1 and its appendix tables.
ATTRIBUTE_KEYS: tuple[str, ...] = tuple(ATTRIBUTE_PHRASES)

#: Key -> the text a CLIP estimator embeds: the phrase without its preposition (section 4.1,
#: "a dress", "a suit"), which is also the authors' released query list.
ATTRIBUTE_CLIP_TEXTS: dict[str, str] = {
    key: phrase.split(" ", 1)[1] for key, phrase in ATTRIBUTE_PHRASES.items()
}

#: Key -> the annotation question of section 5 ("Do you see a person [a]?").
ATTRIBUTE_QUESTIONS: dict[str, str] = {
    key: f"Do you see a person {phrase}?" for key, phrase in ATTRIBUTE_PHRASES.items()
}

#: The reference string r(a) of the calibrated CLIP estimator (equation 5): an irrelevant text.
CALIBRATION_REFERENCE = "an object"

#: The 16 contexts C of Table 2, in the paper's (and the released prompts') order.
CONTEXTS: tuple[str, ...] = (
    "sitting at a table",
    "sitting on a bed",
    "standing on a skateboard",
    "standing next to a rack",
    "riding a bike",
    "riding a horse",
    "laying on the snow",
    "laying on a couch",
    "walking through a forest",
    "walking down a sidewalk",
    "holding up a smartphone",
    "holding an umbrella",
    "jumping into the air",
    "jumping over a box",
    "running across the park",
    "running on the beach",
)

#: The gender terms G-hat of the cross-modal classifiers' training texts (section 4.2).
CLS_GENDER_INDICATORS: tuple[str, ...] = ("A man", "A woman", "A person")

YES = "yes"
NO = "no"


class GepInputError(ValueError):
    """Input the GEP statistics cannot use; the message names the item (and question) at fault."""


# --- CLS training texts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClsTrainingTexts:
    """Training texts of one attribute's cross-modal classifier: label 1 and label 0."""

    positives: tuple[str, ...]
    negatives: tuple[str, ...]


def cls_training_texts(
    genders: Sequence[str] = CLS_GENDER_INDICATORS,
    attributes: Mapping[str, str] = ATTRIBUTE_PHRASES,
    contexts: Sequence[str] = CONTEXTS,
    *,
    ending: str = ".",
) -> dict[str, ClsTrainingTexts]:
    """Per attribute key, the CLS training texts "[g] [attribute] [c]" (positive) and "[g] [c]" (negative)."""
    if not genders or not attributes or not contexts:
        raise ValueError("cls_training_texts needs at least one gender, one attribute and one context")
    negatives = tuple(f"{g} {c}{ending}" for g in genders for c in contexts)
    return {
        key: ClsTrainingTexts(
            positives=tuple(f"{g} {phrase} {c}{ending}" for g in genders for c in contexts),
            negatives=negatives,
        )
        for key, phrase in attributes.items()
    }
