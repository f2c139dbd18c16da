"""manage.py create_join_link: prints a URL that works; bad input is one line and writes nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from crowd.models import GuidelineExample, JoinLink
from tests.crowd.conftest import COMPLETION_URL


def _run(*args: str) -> str:
    out = StringIO()
    call_command("create_join_link", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def test_the_printed_link_enrols_a_participant_and_the_examples_are_kept(study, items):
    url = _run(
        "--study", study.slug, "--quota", "40", "--completion-url", COMPLETION_URL, "--completion-code", "C1234",
        "--panel-param", "workerId", "--max-participants", "100", "--expires-in-hours", "48",
        "--example", f"male={items[0].key}", "--example", f"gender:female={items[1].key}",
        "--base-url", "https://biaslab.example.org/",
    )  # fmt: skip
    assert url.startswith("https://biaslab.example.org/join/")
    link = JoinLink.objects.get()
    assert (link.quota, link.param_names, link.max_participants) == (40, ["workerId"], 100)
    assert link.expires_at is not None
    assert GuidelineExample.objects.count() == 2
    response = Client().get(url.removeprefix("https://biaslab.example.org") + "?workerId=w-1")
    assert response.status_code == 302


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (("--quota", "0"), "quota must be at least 1 item per participant (got 0)."),
        (("--completion-url", "ftp://panel.example.org/done"), "is not an http(s) URL"),
        (("--example", "male=missing.png"), "the study has no item 'missing.png'"),
        (("--example", "male"), "write [QUESTION:]ANSWER=ITEM_KEY"),
        (("--expires-in-hours", "0"), "--expires-in-hours must be more than 0"),
    ],
)
def test_bad_input_is_one_clear_line_and_writes_nothing(study, items, changes, says):
    options = {"--quota": "40", "--completion-url": COMPLETION_URL, "--completion-code": "C1"}
    args = ["--study", study.slug]
    for flag, value in options.items():
        if flag not in changes:
            args += [flag, value]
    with pytest.raises(CommandError) as caught:
        _run(*args, *changes)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not JoinLink.objects.exists()
    assert not GuidelineExample.objects.exists()
