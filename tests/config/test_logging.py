"""The console log of a refused request: one short line per 403, no tracebacks (a development
server used to print two full tracebacks for every 403); a 500 keeps its traceback, once."""

from __future__ import annotations

import io
import logging

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.core.handlers.exception import response_for_exception
from django.test import RequestFactory
from django.utils.log import configure_logging


@pytest.fixture
def console(settings):
    """What the console shows with the project's logging as a development server sets it up
    (Django's defaults, then LOGGING): every stream handler writes to one buffer."""
    settings.DEBUG = True
    configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)
    buffer = io.StringIO()
    handlers = {h for name in ("", "django", "django.request") for h in logging.getLogger(name).handlers}
    for handler in handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(buffer)
    yield buffer
    configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)


def _answer(exception: Exception, path: str = "/studies/") -> int:
    request = RequestFactory().get(path)
    request.user = AnonymousUser()
    try:
        raise exception
    except Exception as exc:
        return response_for_exception(request, exc).status_code


def test_a_403_logs_one_short_line(console):
    assert _answer(PermissionDenied("Researchers only.")) == 403
    logged = console.getvalue()
    assert logged == "Forbidden (Permission denied): /studies/\n"


def test_a_500_keeps_its_traceback_once(console):
    assert _answer(ZeroDivisionError("boom")) == 500
    logged = console.getvalue()
    assert logged.count("Traceback (most recent call last)") == 1
    assert logged.count("Internal Server Error: /studies/") == 1


def test_the_log_level_setting_still_rules_django_s_records(console):
    assert logging.getLogger("django.request").getEffectiveLevel() == logging.getLevelName(settings.LOG_LEVEL)
