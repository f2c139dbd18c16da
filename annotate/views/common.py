"""What the HTML screens share: methods, the study a page is about, an item's images."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from studies.models import ImageRole, Item, Study
from studies.selectors import item_images, study_or_404
from studies.session import study_remember, study_remembered

READ = ("GET", "HEAD")
WRITE = ("POST",)


def choose_study(request: HttpRequest, slug: str | None, url_name: str) -> Study | HttpResponse:
    """The study of the URL, else the remembered or only one, else a page to pick one."""
    slug = slug or request.GET.get("study") or None
    if slug is not None:
        study = study_or_404(slug)
        study_remember(request, study)
        return study
    if "choose" not in request.GET:
        remembered = study_remembered(request)
        if remembered is not None:
            return remembered
    studies = list(Study.objects.order_by("name"))
    if len(studies) == 1:
        study_remember(request, studies[0])
        return studies[0]
    return render(request, "annotate/choose_study.html", {"studies": studies, "url_name": url_name})


def images_view(item: Item) -> dict[str, Any]:
    """The item's images as the templates lay them out: a ``pair``, or the ``main`` image."""
    links = item_images(item)
    pair = ImageRole.INPUT in links and ImageRole.OUTPUT in links
    main = links.get(ImageRole.IMAGE) or links.get(ImageRole.OUTPUT) or links.get(ImageRole.INPUT)
    return {
        "pair": pair,
        "input": links.get(ImageRole.INPUT),
        "output": links.get(ImageRole.OUTPUT),
        "main": main,
        "all": list(links.values()),
    }
