"""When do N annotators' answers settle a question by themselves? Pure rules, no Django.

Used by the labeling services (to set or remove an agreed final label) and by reports (to
explain a state), so both read the same rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

UNANIMOUS = "unanimous"
MAJORITY = "majority"


def agreed_answer(values: Sequence[str], *, needed: int, rule: str) -> str | None:
    """The answer the labels agree on, or None while they do not settle it.

    - fewer than ``needed`` labels: None (labeling is not finished);
    - ``unanimous``: every label gives the same answer;
    - ``majority``: one answer has more than half of the labels (3 labels: 2-1 settles it;
      a 1-1-1 split or 2-2 tie does not).
    """
    if needed < 1:
        raise ValueError(f"needed must be at least 1, got {needed}.")
    if len(values) < needed or not values:
        return None
    counts = Counter(values).most_common()
    value, count = counts[0]
    if rule == UNANIMOUS:
        return value if count == len(values) else None
    if rule == MAJORITY:
        return value if 2 * count > len(values) else None
    raise ValueError(f"Unknown agreement rule “{rule}” (known: {UNANIMOUS}, {MAJORITY}).")


_NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def rule_text(*, needed: int, rule: str) -> str:
    """The rule in a reader's words, for a report to state the study's own (e.g. "three
    annotators per image; an answer is final when more than half of them (2 of 3) agree, and
    otherwise when a researcher settles it")."""
    if needed < 1:
        raise ValueError(f"needed must be at least 1, got {needed}.")
    count = _NUMBERS[needed] if needed < len(_NUMBERS) else str(needed)
    if needed == 1:
        return "one annotator per image, whose answer is final"
    if rule == UNANIMOUS:
        agree = "both agree" if needed == 2 else f"all {count} agree"
    elif rule == MAJORITY:
        agree = f"more than half of them ({needed // 2 + 1} of {needed}) agree"
    else:
        raise ValueError(f"Unknown agreement rule “{rule}” (known: {UNANIMOUS}, {MAJORITY}).")
    return f"{count} annotators per image; an answer is final when {agree}, otherwise when a researcher settles it"
