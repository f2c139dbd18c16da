"""The design of Zhang et al. 2023's GEP study as plain data, its prompts and CLS training texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# --- The paper's design: genders, settings, attributes (Table 1), contexts (Table 2) --------------

WOMAN = "woman"
MAN = "man"
#: Metadata values of ``gender``; the GEP vector is woman minus man, so woman comes first.
GENDERS: tuple[str, str] = (WOMAN, MAN)
#: The gender indicators G of section 3, as they open a prompt.
GENDER_INDICATORS: dict[str, str] = {WOMAN: "A woman", MAN: "A man"}

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


# --- Prompts --------------------------------------------------------------------------------------

#: Columns of the shipped prompt set ``generation/prompt_sets/gep2023.csv``.
GEP_PROMPT_COLUMNS: tuple[str, ...] = (
    "category",
    "word",
    "prompt",
    "gender",
    "setting",
    "context",
    "attribute",
)


@dataclass(frozen=True)
class GepPrompt:
    """One prompt of the study with its images' metadata (``attribute`` None when neutral)."""

    gender: str
    setting: str
    context: str
    attribute: str | None
    prompt: str

    @property
    def category(self) -> str:
        return self.setting

    @property
    def word(self) -> str:
        return self.context

    def as_row(self) -> dict[str, str]:
        """The CSV row, keyed by :data:`GEP_PROMPT_COLUMNS` (empty attribute for neutral prompts)."""
        return {
            "category": self.category,
            "word": self.word,
            "prompt": self.prompt,
            "gender": self.gender,
            "setting": self.setting,
            "context": self.context,
            "attribute": self.attribute or "",
        }


def gep_prompt_text(gender: str, context: str, attribute: str | None = None) -> str:
    """ "A woman sitting at a table." (neutral) or "A woman in boots sitting at a table." (explicit)."""
    if gender not in GENDER_INDICATORS:
        raise ValueError(f"gender {gender!r} is not one of {', '.join(GENDERS)}")
    if attribute is None:
        return f"{GENDER_INDICATORS[gender]} {context}."
    if attribute not in ATTRIBUTE_PHRASES:
        raise ValueError(f"attribute {attribute!r} is not one of {', '.join(ATTRIBUTE_KEYS)}")
    return f"{GENDER_INDICATORS[gender]} {ATTRIBUTE_PHRASES[attribute]} {context}."


def gep_prompts(
    keys: Sequence[str] = ATTRIBUTE_KEYS, contexts: Sequence[str] = CONTEXTS
) -> tuple[GepPrompt, ...]:
    """The study's prompts (512 with the defaults), each woman/man pair side by side."""
    prompts = [
        GepPrompt(gender, NEUTRAL, context, None, gep_prompt_text(gender, context))
        for context in contexts
        for gender in GENDERS
    ]
    prompts += [
        GepPrompt(gender, EXPLICIT, context, key, gep_prompt_text(gender, context, key))
        for key in keys
        for context in contexts
        for gender in GENDERS
    ]
    return tuple(prompts)


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
