"""When do N annotators' answers settle a question by themselves: the rule labeling and reports share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

UNANIMOUS = "unanimous"
MAJORITY = "majority"


def agreed_answer(values: Sequence[str], *, needed: int, rule: str) -> str | None:
    """The answer ``needed`` labels agree on (``unanimous``, or ``majority``: more than half), else None."""
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
    """The rule in a reader's words, for a report to state the study's own."""
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
