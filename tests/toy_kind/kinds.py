"""The ``rating`` question kind: a rating from 1 to 5, keys 1 to 5, stored as "1" … "5"."""

from __future__ import annotations

from typing import Any

from studies.kinds import AnswerInvalid, ItemLike, QuestionKind, QuestionLike

STARS = ("1", "2", "3", "4", "5")


class RatingKind(QuestionKind):
    name = "rating"
    label = "A rating from 1 (worst) to 5 (best), keys 1 to 5"
    template = "toy_kind/rating.html"
    script = "toy_kind/rating.js"
    needs_choices = False

    def validate(self, question: QuestionLike, value: str, item: ItemLike | None = None) -> str:
        if value not in STARS:
            raise AnswerInvalid(f"“{value}” is no rating of “{question.key}”: rate it 1 to 5.")
        return value

    def context(
        self, question: QuestionLike, chosen: str, field: str, item: ItemLike | None
    ) -> dict[str, Any]:
        return {"stars": [{"value": star, "checked": star == chosen} for star in STARS]}

    def keys(self, question: QuestionLike, *, alone: bool) -> list[dict[str, str]]:
        return [{"key": "1-5", "what": f"Rate “{question.text}” from 1 (worst) to 5 (best)"}]


RATING = RatingKind()
