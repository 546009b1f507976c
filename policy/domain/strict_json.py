"""JSON from a person or an outside party, read strictly: one text, one meaning, or a refusal.

Python's ``json`` module reads texts that have no single meaning and values no JSON column can
hold:

- an object with a key twice: ``{"goal": "first", "goal": "second"}`` is ``second`` here and
  ``first`` to a parser that keeps the first key. What a person reviewed, what the gate checked
  and what a tool runs could differ, so nobody picks one: the text is refused;
- ``NaN`` and ``Infinity`` (not JSON, RFC 8259 §6) and numbers that overflow to infinity
  (``1e999``); RFC 8785 canonical JSON, which every hash uses, has no spelling for them;
- a lone surrogate (``"\\ud800"``): a Python string, but not Unicode text (no UTF-8 form);
- a NUL character (``"\\u0000"``): PostgreSQL stores it in neither ``text`` nor ``jsonb``;
- nesting deeper than canonical JSON allows (64), integers a JSON number cannot hold exactly.

Every place JSON arrives from outside reads it here (API bodies, console forms, scenario
files, MCP messages and listings, a model's response and tool-call arguments, JSON settings),
so each refuses the same things with the same codes. ``loads`` parses and checks; ``parse``
only parses (for texts whose values are checked later, entry by entry); ``check`` checks a
value that arrived already parsed.
"""

from __future__ import annotations

import json
from typing import Any

from policy.domain.canonical import canonical
from policy.domain.errors import CanonicalError, DomainError

DUPLICATE_KEY = "DUPLICATE_JSON_KEY"
NOT_JSON = "NOT_JSON"
NON_FINITE_NUMBER = "NON_FINITE_NUMBER"  # the code canonical() uses too
NUL_CHARACTER = "NUL_CHARACTER"
INVALID_UNICODE = "INVALID_UNICODE"
VALUE_TOO_DEEP = "VALUE_TOO_DEEP"
NUMBER_OUT_OF_RANGE = "NUMBER_OUT_OF_RANGE"


class JsonRefused(DomainError):
    """A JSON text or value refused; ``code`` says why (one of the names above)."""

    code = "JSON_REFUSED"


class _Duplicate(Exception):
    # Not a ValueError: json.loads must not mistake it for a syntax error of its own.
    def __init__(self, key: str) -> None:
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return out


def _constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number", code=NON_FINITE_NUMBER)


def printable(text: str) -> str:
    """Outside text as an error, a log line or a page may show it: printable ASCII, at most
    64 characters of the original (a NUL, a newline or a lone surrogate shows as its escape)."""
    return text[:64].encode("unicode_escape").decode("ascii")


def parse(text: str | bytes) -> Any:
    """Parse ``text`` (bytes must be UTF-8), refusing repeated keys and NaN/Infinity."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise JsonRefused("JSON text is not UTF-8", code=INVALID_UNICODE) from None
    try:
        return json.loads(text, object_pairs_hook=_unique, parse_constant=_constant)
    except _Duplicate as exc:
        key = printable(exc.key)
        raise JsonRefused(f'the key "{key}" appears twice in one object', code=DUPLICATE_KEY,
                          key=key) from None  # fmt: skip
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                          code=NOT_JSON, line=exc.lineno, column=exc.colno) from None  # fmt: skip
    except RecursionError:
        raise JsonRefused("JSON nests too deeply", code=VALUE_TOO_DEEP) from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise JsonRefused(f"not accepted: {exc}"[:200], code=NUMBER_OUT_OF_RANGE) from None


def check(value: Any) -> None:
    """Refuse a value that is not plain, storable JSON (see the module docstring)."""
    try:
        canonical(value)
    except CanonicalError as exc:
        raise JsonRefused(exc.message, code=exc.code) from None
    if _has_nul(value):
        raise JsonRefused("NUL characters are not accepted", code=NUL_CHARACTER)


def loads(text: str | bytes) -> Any:
    """``parse`` then ``check``: the one way to read JSON from outside."""
    value = parse(text)
    check(value)
    return value


def _has_nul(value: Any) -> bool:
    # Called after canonical() accepted the value: at most 64 deep, so recursion is bounded.
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    if isinstance(value, dict):
        return any("\x00" in key or _has_nul(item) for key, item in value.items())
    return False
