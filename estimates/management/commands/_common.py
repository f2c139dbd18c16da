"""What the estimates commands share: finding the study by slug."""

from __future__ import annotations

from django.core.management.base import CommandError

from studies.models import Study


def study_by_slug(slug: str) -> Study:
    study = Study.objects.filter(slug=slug).first()
    if study is None:
        known = ", ".join(Study.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
        raise CommandError(f"--study: no study '{slug}' (studies: {known}).")
    return study
