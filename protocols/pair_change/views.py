"""The pair-change analysis's own page: a word's pairs, seed photo and edit side by side, with
their measurements, verdicts and answers."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import Http404, HttpResponse

from metrics import pair_change as pc
from protocols.pair_change import selectors as psel
from protocols.pair_change.report import PairChangeReport
from protocols.pair_change.sampling import PairRow
from protocols.pair_change.tables import LABEL_NAMES, WORD_FIGURES, score
from reports import views as base
from reports.analyses import AnalysisError
from studies.models import Image, ImageRole
from studies.typing import HtmxHttpRequest

# Pairs shown per T2I model: beyond it the page says how many more.
PAIR_LIMIT = 120
FIELDS = (("age", "Age", "y"), ("gender", "Gender", ""), ("skin_gray", "Skin gray", ""))


def _measured(value: Any, suffix: str) -> str:
    if value is None:
        return "\u2013"
    if isinstance(value, float):
        return f"{value:.1f}{suffix and ' ' + suffix}"
    return str(value)


def _pair(
    result: PairChangeReport, row: PairRow, images: dict[int, Any], answers: psel.PairAnswers | None
) -> dict[str, Any]:
    """One pair as the template shows it."""
    scored = pc.score_pair(row.pair, result.thresholds)
    sides = []
    for role in (ImageRole.INPUT.value, ImageRole.OUTPUT.value):
        measured = row.pair.seed if role == ImageRole.INPUT else row.pair.output
        outputs = row.outputs.get(role, {})
        sides.append(
            {
                "role": role,
                "name": "Seed photo" if role == ImageRole.INPUT else "Edited image",
                "image": images.get(row.images[role]),
                "face": measured.face,
                "values": [(label, _measured(getattr(measured, name), unit)) for name, label, unit in FIELDS],
                "detectors": [
                    {
                        "name": name,
                        "n_faces": output.get("n_faces"),
                        "overlay": settings.MEDIA_URL + output["overlay"] if output.get("overlay") else "",
                    }
                    for name, output in outputs.items()
                ],
            }
        )
    attributes = []
    for attribute in pc.ATTRIBUTES:
        defined = result.defined(attribute)
        verdict = pc.pair_verdict(scored, attribute) if defined else None
        drawn = result.drawn.get(attribute, {}).get(row.key)
        final = answers.finals.get(attribute) if answers else None
        attributes.append(
            {
                "attribute": attribute,
                "score": score(scored.score(attribute)) if defined else "\u2013",
                "measured": scored.measured(attribute),
                "verdict": LABEL_NAMES.get(verdict, "none") if verdict else "none",
                "drawn": LABEL_NAMES.get(drawn, drawn) if drawn else "",
                "labels": answers.labels.get(attribute, []) if answers else [],
                "final": final,
            }
        )
    return {"row": row, "sides": sides, "attributes": attributes}


@base.researcher_only
def word_detail(request: HtmxHttpRequest, domain: str, word: str) -> HttpResponse:
    """One word of one domain: its scores per T2I model and its pairs, each with both photos,
    the measurements and overlays, the scores and verdicts, and the human answers."""
    filters, analysis = base.page_filters(request, "pair_word")
    try:
        result: PairChangeReport = filters.result(bootstrap=0)
    except AnalysisError as error:
        return base.bad_filter(error)
    summaries = [(model, w) for model in result.models for w in result.words(model, domain) if w.word == word]
    if not summaries:
        raise Http404(f"No measured pair of the word {word!r} in the domain {domain!r}.")
    rows = [r for r in result.rows if r.pair.domain == domain and r.pair.word == word]
    shown: dict[str, list[PairRow]] = {}
    for row in rows:
        shown.setdefault(row.t2i_model, []).append(row)
    visible = [r for model_rows in shown.values() for r in model_rows[:PAIR_LIMIT]]
    images = Image.objects.in_bulk(list({i for r in visible for i in r.images.values()}))
    answers = psel.pair_answers(filters.scope.study, (r.item_id for r in visible))
    groups = [
        {
            "model": model,
            "pairs": [_pair(result, r, images, answers.get(r.item_id)) for r in model_rows[:PAIR_LIMIT]],
            "n": len(model_rows),
            "more": max(0, len(model_rows) - PAIR_LIMIT),
        }
        for model, model_rows in shown.items()
    ]
    context = base.base_context(filters, "pair_word", analysis) | {
        "domain": domain,
        "word": word,
        "result": result,
        "summaries": [
            {
                "model": model,
                "n_pairs": w.n_pairs,
                "n_male": w.n_male_seeds,
                "n_female": w.n_female_seeds,
                "figures": [(label, score(result.word_value(w, key))) for key, label in WORD_FIGURES],
            }
            for model, w in summaries
        ],
        "groups": groups,
        "n_rows": len(rows),
    }
    return base.render_page(request, "pair_change/word.html", context)
