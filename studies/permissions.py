"""The three roles of BiasLab, as Django groups plus ``is_staff`` for admins.

- annotator: labels images of the studies they are added to, nothing else;
- researcher: agreement, disputes, reports (and everything an annotator may see of images);
- admin (``is_staff``): users, imports, exports, and everything a researcher may do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from studies.models import Study
    from studies.typing import UserLike

ANNOTATOR = "annotator"
RESEARCHER = "researcher"
ROLE_GROUPS = (ANNOTATOR, RESEARCHER)


# The checks are TypeGuards: a True answer means a signed-in account, so a caller's ``user``
# (``request.user``, typed ``User | AnonymousUser``) is a ``User`` after the check. (Not TypeIs:
# a False answer says nothing about which of the two it is.)


def _groups(user: UserLike) -> set[str]:
    # getattr, here and in is_admin: the role checks stay total, anything that is not a
    # signed-in user (None included) holds no role.
    if not getattr(user, "is_authenticated", False):
        return set()
    cached: set[str] | None = getattr(user, "_biaslab_groups", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        # A per-request cache on the user object (request.user lives as long as the request),
        # an attribute the model does not declare: hence setattr.
        setattr(user, "_biaslab_groups", cached)  # noqa: B010
    return cached


def is_admin(user: UserLike) -> TypeGuard[User]:
    """True for a signed-in staff member or superuser."""
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or user.is_superuser))


def is_researcher(user: UserLike) -> TypeGuard[User]:
    """True for researchers and admins (admins may do everything a researcher may)."""
    return is_admin(user) or RESEARCHER in _groups(user)


def is_annotator(user: UserLike) -> TypeGuard[User]:
    """True for members of the annotator group (the group alone: not admins by default)."""
    return ANNOTATOR in _groups(user)


def may_label(user: UserLike, study: Study) -> TypeGuard[User]:
    """An annotator of the study (membership), whatever else they are."""
    if not user.is_authenticated:
        return False
    return study.annotators.filter(pk=user.pk).exists()


def may_see_study(user: UserLike, study: Study) -> bool:
    """Researchers and admins see every study; annotators the studies they label."""
    return is_researcher(user) or may_label(user, study)
