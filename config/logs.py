"""Logging filters of the settings' ``LOGGING``."""

from __future__ import annotations

import logging


def client_error_one_line(record: logging.LogRecord) -> bool:
    """A request answered with a 4xx (``django.request``'s "Forbidden (Permission denied): /url/"
    of every 403, a 400 of a suspicious request) logs its one line without the traceback Django
    attaches: the refusal is the answer, not a fault to debug. A 5xx keeps its traceback."""
    status = getattr(record, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500:
        record.exc_info = None
        record.exc_text = None
    return True
