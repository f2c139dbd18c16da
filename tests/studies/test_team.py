"""A study's annotators, added without the admin (``studies.services.annotators_add``). The role
groups a migrated database has: tests/migrations/test_role_groups.py (a transactional test's flush
empties the table, so only a migration test can see what the migration wrote)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from studies import permissions
from studies.errors import AnnotatorsRefused, StaffRefused
from studies.services import annotators_add
from tests.factories import StudyFactory, UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def team_study():
    return StudyFactory(slug="team")


def _members(study) -> set[str]:
    return set(study.annotators.values_list("username", flat=True))


def test_missing_accounts_are_created_without_a_password_in_the_group_and_the_study(team_study):
    done = annotators_add(study=team_study, usernames=["alice", "bob"])
    assert [u.username for u in done.created] == ["alice", "bob"]
    assert (done.added, done.unchanged) == ((), ())
    for name in ("alice", "bob"):
        user = User.objects.get(username=name)
        assert not user.has_usable_password()
        assert permissions.is_annotator(user)
        assert not permissions.is_researcher(user)
    assert _members(team_study) == {"alice", "bob"}


def test_an_existing_account_joins_and_a_second_run_changes_nothing(team_study, outsider):
    first = annotators_add(study=team_study, usernames=["oscar", "alice"])
    assert [u.username for u in first.added] == ["oscar"]
    assert [u.username for u in first.created] == ["alice"]
    assert permissions.is_annotator(User.objects.get(username="oscar"))
    password = User.objects.get(username="oscar").password
    again = annotators_add(study=team_study, usernames=["alice", "oscar"])
    assert (again.created, again.added, again.unchanged) == ((), (), ("alice", "oscar"))
    assert not again.changed
    assert User.objects.get(username="oscar").password == password
    assert User.objects.filter(username__in=["alice", "oscar"]).count() == 2


def test_an_annotator_of_another_study_joins_this_one(team_study, annotator_a):
    done = annotators_add(study=team_study, usernames=["anna"])
    assert [u.username for u in done.added] == ["anna"]
    assert _members(team_study) == {"anna"}


@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_researchers_and_admins_are_refused_unless_allowed(request, team_study, persona):
    user = request.getfixturevalue(persona)
    role = "an admin" if persona == "admin_user" else "a researcher"
    with pytest.raises(StaffRefused, match=f"'{user.username}' is {role}: not added") as refused:
        annotators_add(study=team_study, usernames=["alice", user.username])
    assert refused.value.usernames == [user.username]
    assert not User.objects.filter(username="alice").exists()
    assert _members(team_study) == set()
    done = annotators_add(study=team_study, usernames=[user.username], allow_staff=True)
    assert [u.username for u in done.added] == [user.username]
    assert _members(team_study) == {user.username}


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["alice", "bad name"], r"invalid username: 'bad name' \(letters, digits and @ \. \+ - _ only\)"),
        (["alice", "x" * 151], r"invalid username: 'x+' \(longer than 150 characters\)"),
        (["alice", "ok/no"], r"invalid username: 'ok/no'"),
        ([" ", ""], "no username given"),
    ],
)
def test_an_invalid_username_refuses_the_whole_list(team_study, names, message):
    with pytest.raises(AnnotatorsRefused, match=message):
        annotators_add(study=team_study, usernames=names)
    assert not User.objects.filter(username="alice").exists()
    assert _members(team_study) == set()


def test_a_deactivated_account_is_refused_by_name(team_study):
    UserFactory(username="gone", is_active=False)
    with pytest.raises(AnnotatorsRefused, match="deactivated account: 'gone'"):
        annotators_add(study=team_study, usernames=["alice", "gone"])
    assert not User.objects.filter(username="alice").exists()


def test_repeated_names_and_spaces_count_once(team_study):
    done = annotators_add(study=team_study, usernames=[" alice ", "alice", "bob"])
    assert [u.username for u in done.created] == ["alice", "bob"]
