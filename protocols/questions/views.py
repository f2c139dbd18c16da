"""The questions protocol's own page: the images behind one (question, group, answer) bar,
each with every annotator's answer."""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404

from protocols.questions import selectors as qsel
from reports import views as base
from reports.selectors import Scope
from studies.models import Question
from studies.typing import HtmxHttpRequest

#: Images shown on one page: beyond it the page says how many more.
LIMIT = 200


@base.researcher_only
def answer_images(request: HtmxHttpRequest) -> HttpResponse:
    """``?question=<key>&group=<value>&answer=<value>`` (and the report's filters): the images
    of that group whose final answer to the question is that answer."""
    filters, analysis = base.page_filters(request, "question_answer")
    study = filters.scope.study
    question = get_object_or_404(Question, study=study, key=request.GET.get("question", ""))
    answer = request.GET.get("answer", "")
    if answer not in question.values:
        raise Http404(f"No answer {answer!r} to question {question.key!r}.")
    group = request.GET.get("group", "")
    rows, n = qsel.answer_items(
        Scope(study, t2i_model=filters.t2i_model),
        question_key=question.key,
        group=group,
        answer=answer,
        limit=LIMIT,
    )
    context = base.base_context(filters, "question_answer", analysis) | {
        "question": question,
        "group": group,
        "answer": answer,
        "answer_name": question.display(answer),
        "column": qsel.compare_column(study),
        "rows": rows,
        "n": n,
        "more": n - len(rows),
    }
    return base.render_page(request, "questions/answer.html", context)
