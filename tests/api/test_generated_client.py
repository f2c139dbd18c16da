"""A Python client generated from the served schema (openapi-python-client) works against a
live server with the demo data: log in, fetch the next item, submit a label, read agreement —
and an error comes back as the schema's ``Error``. Nothing here is written by hand but the calls."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from openapi_python_client import generate
from openapi_python_client.config import Config, ConfigFile, MetaType
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db(transaction=True)

PACKAGE = "biaslab_client"
PASSWORDS = {
    "demo-annotator-1": "generated-client-annotator",
    "demo-researcher": "generated-client-researcher",
}


@pytest.fixture
def client_package(tmp_path, db):
    """The client generated from /api/schema/, importable as ``biaslab_client``."""
    api = APIClient()
    api.force_authenticate(get_user_model().objects.create_user("schema-reader"))
    schema = tmp_path / "schema.json"
    schema.write_bytes(api.get("/api/schema/", {"format": "json"}).content)
    config = Config.from_sources(
        ConfigFile(post_hooks=[], package_name_override=PACKAGE),
        MetaType.NONE,
        schema,
        "utf-8",
        True,
        tmp_path / "client" / PACKAGE,
    )
    errors = generate(config=config)
    assert not [e for e in errors if e.level == "error"], [f"{e.header}: {e.detail}" for e in errors]
    assert not errors, [f"{e.header}: {e.detail}" for e in errors]  # no part of the schema skipped
    sys.path.insert(0, str(tmp_path / "client"))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path / "client"))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


@pytest.fixture
def demo(db):
    with open(os.devnull, "w") as quiet:
        call_command("seed_demo", stdout=quiet)
    for username, password in PASSWORDS.items():
        user = get_user_model().objects.get(username=username)
        user.set_password(password)
        user.save()


def test_a_generated_client_logs_in_gets_work_submits_a_label_and_reads_agreement(
    client_package, demo, live_server
):
    from biaslab_client import AuthenticatedClient, Client
    from biaslab_client.api.agreement import agreement_retrieve
    from biaslab_client.api.auth import token_create
    from biaslab_client.api.labeling import labels_create, next_item
    from biaslab_client.models import Agreement, Error, Label, LabelAnswerRequest, NextItem, TokenCreate

    def log_in(username: str) -> AuthenticatedClient:
        body = token_create.TokenCreateRequest(username=username, password=PASSWORDS[username])
        answer = token_create.sync(client=Client(base_url=live_server.url), body=body)
        assert isinstance(answer, TokenCreate), answer
        return AuthenticatedClient(base_url=live_server.url, token=answer.token, prefix="Token")

    annotator = log_in("demo-annotator-1")
    work = next_item.sync(client=annotator, slug="demo")
    assert isinstance(work, NextItem)
    item = work.item
    question = item.questions[0]
    choice = next(c for c in question.choices if not c.requires_reason)
    label = labels_create.sync(
        client=annotator, body=LabelAnswerRequest(item=item.id, question=question.key, value=choice.value)
    )
    assert isinstance(label, Label), label
    assert (label.item, label.question, label.value, label.annotator) == (
        item.id,
        question.key,
        choice.value,
        "demo-annotator-1",
    )

    refused = labels_create.sync(
        client=annotator, body=LabelAnswerRequest(item=item.id, question=question.key, value="no-such-answer")
    )
    assert isinstance(refused, Error)
    assert (refused.status, refused.code) == (400, "invalid_answer")
    assert "no-such-answer" in refused.detail

    report = agreement_retrieve.sync(client=log_in("demo-researcher"), study="demo")
    assert isinstance(report, Agreement)
    assert report.question == "gender"
    assert report.n_items > 0
    assert report.cohen_kappa is None or -1.0 <= report.cohen_kappa <= 1.0
