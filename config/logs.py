"""Logging filters of the settings' ``LOGGING``."""

from __future__ import annotations

import logging


def client_error_one_line(record: logging.LogRecord) -> bool:
    """Log filter: a request answered with a 4xx logs its one line without the traceback Django
    attaches (docs/explanation/web-side.md); a 5xx keeps its traceback."""
    status = getattr(record, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500:
        record.exc_info = None
        record.exc_text = None
    return True
