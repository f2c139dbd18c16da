"""Schemathesis against a live test server with the demo data, as each persona in turn.

``st run`` in a subprocess against pytest-django's ``live_server`` (the demo studies made by
``seed_demo``, the command ``bin/demo`` runs, plus a user without a role), with every check —
the allow-list of rules a schema cannot express is ``schemathesis_hooks.DATA_RULES`` — and
every phase (examples, coverage, fuzzing, stateful), a fixed seed and a bounded number of
examples per operation. A run fails on any 5xx, any response that does not match the schema,
any status the schema does not list, and any invalid input the server accepts. Settings shared
by every run are in ``schemathesis.toml``.

The demo is seeded once and the personas run one after the other on it, each seeing what the
runs before it wrote (seeding it again for each would cost more than a run); every persona runs
even after one fails, and the failure names it. Half the personas run with DEBUG on, half with
it off: Django answers some errors differently in each (its technical 404 and 500 pages), and
both must be the API's JSON.

``pytest -m schemathesis`` runs only this; ``-m "not schemathesis"`` skips it.
BIASLAB_ST_MAX_EXAMPLES changes the examples per operation (default 15).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

from accounts.services import api_token_create

pytestmark = [pytest.mark.schemathesis, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("schemathesis.toml")
SEED = 20261123
MAX_EXAMPLES = int(os.environ.get("BIASLAB_ST_MAX_EXAMPLES", "15"))
#: (username, DEBUG): the demo's annotator, researcher and admin, and a user with no role, who
#: must be refused everywhere.
PERSONAS = [
    ("demo-annotator-1", True),
    ("demo-researcher", False),
    ("demo-admin", True),
    ("outsider", False),
]


@pytest.fixture
def demo(db, settings):
    """The demo data, with the API's rate limits off (the fuzzer sends hundreds of requests a
    minute; the 429 answer has tests of its own in tests/api/test_errors.py)."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"anon": None, "user": None, "login": None},
    }
    with open(os.devnull, "w") as quiet:
        call_command("seed_demo", stdout=quiet)
    get_user_model().objects.create_user("outsider", password="outsider-pass")


def _schema_file(tmp_path: Path, username: str) -> Path:
    """The schema as the server serves it to that logged-in user."""
    client = APIClient()
    client.force_authenticate(get_user_model().objects.get(username=username))
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200, response.content[:500]
    path = tmp_path / "schema.json"
    path.write_bytes(response.content)
    return path


def test_schemathesis_finds_nothing_as_any_persona(demo, live_server, settings, tmp_path):
    failures = [
        failure
        for persona, debug in PERSONAS
        if (failure := _run_as(persona, debug, live_server.url, settings, tmp_path / persona))
    ]
    assert not failures, "\n\n".join(failures)


def _run_as(persona: str, debug: bool, url: str, settings, folder: Path) -> str:
    """One Schemathesis run as ``persona``: "" when it finds nothing, else what it found."""
    settings.DEBUG = debug
    folder.mkdir()
    token = api_token_create(user=get_user_model().objects.get(username=persona))
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(CONFIG),
        "--no-color",
        "run",
        str(_schema_file(folder, persona)),
        "--url",
        url,
        "--seed",
        str(SEED),
        "--max-examples",
        str(MAX_EXAMPLES),
        "--generation-database",
        "none",
        "--report",
        "junit",
        "--report-junit-path",
        str(folder / "junit.xml"),
    ]
    env = {**os.environ, "BIASLAB_ST_TOKEN": token, "PYTHONPATH": str(ROOT)}
    started, server_cpu = time.monotonic(), time.process_time()
    client_cpu = _children_cpu()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    summary = (
        f"schemathesis as {persona} (DEBUG {'on' if debug else 'off'}): "
        f"{time.monotonic() - started:.0f} s, server CPU {time.process_time() - server_cpu:.0f} s, "
        f"Schemathesis CPU {_children_cpu() - client_cpu:.0f} s, exit {result.returncode}"
    )
    print(summary)
    if result.returncode != 0 or "Failures:" in output:
        return f"{summary}\n{output[-30000:]}"
    return ""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
