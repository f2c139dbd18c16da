"""The API's JSON body parser. Its own module: DRF reads ``DEFAULT_PARSER_CLASSES`` while
``rest_framework.views`` is imported, so the class cannot live beside the views' base class."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from studies.jsonbounds import MAX_JSON_BYTES, JSONOutOfBounds, json_loads_bounded


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser within the bounds of every stored JSON value (``studies.jsonbounds``): a body
    nested deeper than ``MAX_JSON_DEPTH`` or larger than ``MAX_JSON_BYTES`` is a 400 ``parse_error``."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read(MAX_JSON_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_JSON_BYTES:
            raise exceptions.ParseError(f"JSON parse error - the body is larger than {MAX_JSON_BYTES} bytes")
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise exceptions.ParseError(f"JSON parse error - not {encoding} text ({exc})") from exc
        try:
            return json_loads_bounded(text, field="the body", check_values=False)
        except JSONOutOfBounds as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
