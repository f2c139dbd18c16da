"""Shared pieces of the API tests: JSON clients per persona, a few items, the error shape."""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import ItemFactory, PromptFactory

ERROR_KEYS = {"status", "code", "detail", "errors"}


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study)
    return [ItemFactory(prompt=prompt) for _ in range(3)]


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is the API's JSON error of ``status`` (and ``code``); returns the body."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) == ERROR_KEYS, body
    assert body["status"] == status
    assert isinstance(body["detail"], str)
    assert body["detail"]
    assert isinstance(body["errors"], dict)
    assert all(isinstance(v, list) and all(isinstance(m, str) for m in v) for v in body["errors"].values())
    if code is not None:
        assert body["code"] == code, body
    return body
