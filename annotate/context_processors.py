from __future__ import annotations

from django.http import HttpRequest

from studies import permissions as role_checks


def roles(request: HttpRequest) -> dict[str, bool]:
    """Which navigation a template may show; views still check permissions themselves."""
    user = request.user
    return {
        "is_annotator": role_checks.is_annotator(user),
        "is_researcher": role_checks.is_researcher(user),
        "is_admin": role_checks.is_admin(user),
    }
