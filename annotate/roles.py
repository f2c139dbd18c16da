"""The three roles of BiasLab, as Django groups plus ``is_staff`` for admins.

- annotator: labels images of the studies they are added to, nothing else;
- researcher: agreement, disputes, reports (and everything an annotator may see of images);
- admin (``is_staff``): users, imports, exports, and everything a researcher may do.
"""

from __future__ import annotations

from typing import Any

ANNOTATOR = "annotator"
RESEARCHER = "researcher"
ROLE_GROUPS = (ANNOTATOR, RESEARCHER)


def _groups(user: Any) -> set[str]:
    if not getattr(user, "is_authenticated", False):
        return set()
    cached = getattr(user, "_biaslab_groups", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        user._biaslab_groups = cached
    return cached


def is_admin(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or user.is_superuser))


def is_researcher(user: Any) -> bool:
    return is_admin(user) or RESEARCHER in _groups(user)


def is_annotator(user: Any) -> bool:
    return ANNOTATOR in _groups(user)
