"""The papers' prompt templates and class lists, as references for the shipped prompt sets, the
class names and the test studies: Zhang et al. 2023's GEP prompts, BiasPainter's Table 1 and
darknet's COCO names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metrics.coco_names import COCO_CLASS_NAMES
from metrics.gep_design import (
    ATTRIBUTE_KEYS,
    ATTRIBUTE_PHRASES,
    CONTEXTS,
    EXPLICIT,
    GENDERS,
    MAN,
    NEUTRAL,
    WOMAN,
)
from metrics.pair_change import ACTIVITY, DOMAINS, OBJECT, PERSONALITY, PROFESSION

#: The gender indicators G of section 3, as they open a prompt.
GENDER_INDICATORS: dict[str, str] = {WOMAN: "A woman", MAN: "A man"}


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
        """The row of ``generation/prompt_sets/gep2023.csv`` (empty attribute for neutral prompts)."""
        return {
            "category": self.setting,
            "word": self.context,
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


#: BiasPainter's Table 1 per-domain templates; ``{article}`` is "a" or "an" (the paper's "a/an").
PROMPT_TEMPLATES: dict[str, str] = {
    ACTIVITY: "a person who is {word}",
    OBJECT: "a person with {article} {word}",
    PERSONALITY: "a person who is {word}",
    PROFESSION: "a person who is {article} {word}",
}


def biaspainter_prompt(domain: str, word: str) -> str:
    """The prompt of Table 1 for ``word`` in ``domain`` ("a person who is an artist")."""
    if domain not in PROMPT_TEMPLATES:
        raise ValueError(f"domain {domain!r} is not one of {', '.join(DOMAINS)}")
    word = word.strip()
    if not word:
        raise ValueError("word is empty")
    article = "an" if word[0].lower() in "aeiou" else "a"
    return PROMPT_TEMPLATES[domain].format(word=word, article=article)


#: darknet's ``data/coco.names`` (YOLOv3, the detector of Mannering 2023), in its index order.
#: It is the same 80 classes in the same order as ``COCO_CLASS_NAMES``; only six spellings differ.
DARKNET_COCO_NAMES: tuple[str, ...] = (
    *COCO_CLASS_NAMES[:3],
    "motorbike",
    "aeroplane",
    *COCO_CLASS_NAMES[5:57],
    "sofa",
    "pottedplant",
    "bed",
    "diningtable",
    "toilet",
    "tvmonitor",
    *COCO_CLASS_NAMES[63:],
)
