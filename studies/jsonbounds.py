"""The one check every JSON value passes before it is stored in a JSON column: bounded depth
and size, no ``\u0000`` (PostgreSQL's ``jsonb`` refuses it), no NaN, Infinity or numbers beyond
a double. ``JSONOutOfBounds`` names the place (``params.a.b[2]``)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Deepest nesting allowed (an object or list counts one level).
MAX_JSON_DEPTH = 32
# Largest value allowed, in bytes of its JSON text.
MAX_JSON_BYTES = 256 * 1024

# Strings skipped when counting brackets, as an unrolled loop (four times faster).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class JSONOutOfBounds(ValueError):
    """A JSON value too deep, too large, not JSON, or holding what the database cannot store."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


def _deeper_than(text: str, limit: int) -> bool:
    """Whether the JSON text nests more than ``limit`` levels, counted without parsing."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _reject_constant(name: str) -> None:
    raise ValueError(name)


def json_loads_bounded(
    text: str | bytes,
    *,
    field: str,
    max_depth: int = MAX_JSON_DEPTH,
    max_bytes: int = MAX_JSON_BYTES,
    check_values: bool = True,
) -> Any:
    """Parse JSON text and check it; size and depth are checked on the text first.
    ``check_values`` False leaves NUL characters and huge numbers to the caller."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise JSONOutOfBounds(field, f"is larger than {max_bytes} bytes ({size} bytes)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONOutOfBounds(field, "is not UTF-8 text") from exc
    if _deeper_than(text, max_depth):
        raise JSONOutOfBounds(field, f"is nested deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise JSONOutOfBounds(field, f"is not valid JSON ({exc.msg})") from exc
    except ValueError as exc:
        if str(exc) in ("NaN", "Infinity", "-Infinity"):
            raise JSONOutOfBounds(field, f"holds {exc} is not a number JSON allows") from exc
        # e.g. an integer of more than 4,300 digits (Python's int conversion limit)
        raise JSONOutOfBounds(field, f"is not valid JSON ({exc})") from exc
    except RecursionError as exc:  # only if the stack is already deep when we are called
        raise JSONOutOfBounds(field, f"is nested deeper than {max_depth} levels") from exc
    if check_values:
        _values_check(value, field=field, max_depth=max_depth)
    return value


def json_bounds_check(value: Any, *, field: str) -> None:
    """Check a value already in memory before it is stored; raises ``JSONOutOfBounds``."""
    _values_check(value, field=field, max_depth=MAX_JSON_DEPTH)
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError) as exc:
        raise JSONOutOfBounds(field, f"is not a JSON value ({exc})") from exc
    if size > MAX_JSON_BYTES:
        raise JSONOutOfBounds(field, f"is larger than {MAX_JSON_BYTES} bytes ({size} bytes)")


def _values_check(value: Any, *, field: str, max_depth: int) -> None:
    """Walk the value with a stack: depth, NUL characters, non-finite numbers."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= max_depth:
                raise JSONOutOfBounds(field, f"is nested deeper than {max_depth} levels")
            if isinstance(node, dict):
                for key, child in node.items():
                    if isinstance(key, str) and "\x00" in key:
                        raise JSONOutOfBounds(
                            where, "has a key with a NUL character (\\u0000), which the database cannot store"
                        )
                    stack.append((child, f"{where}.{key}", depth + 1))
            else:
                stack.extend((child, f"{where}[{n}]", depth + 1) for n, child in enumerate(node))
        elif isinstance(node, str):
            if "\x00" in node:
                raise JSONOutOfBounds(
                    where, "holds a NUL character (\\u0000), which the database cannot store"
                )
        elif isinstance(node, float) and not math.isfinite(node):
            raise JSONOutOfBounds(
                where, "holds a number too large to store (such as 1e400, read as infinity)"
            )
