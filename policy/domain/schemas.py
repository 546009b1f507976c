"""Compiled input validators: a fast yes/no for the JSON Schema subset tool contracts use.

``compile_schema`` turns a schema into a plain Python predicate when every keyword is in the
subset below, and returns None otherwise (the caller then uses jsonschema for everything). The
predicate only answers "valid?"; on "no", jsonschema (draft 2020-12) still produces the
violation and its stable code, so the two can never disagree about *why*. A property test
(tests/domain/test_compiled_schema.py) checks that they agree about *whether*.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Any], bool]

_SUPPORTED = {
    "type", "properties", "required", "additionalProperties", "minLength", "maxLength",
    "pattern", "enum", "const", "minimum", "maximum", "items", "minItems", "maxItems",
    "description", "title", "default", "$schema",
}  # fmt: skip


class _Unsupported(Exception):
    pass


def _is_type(value: Any, name: str) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "integer":
        # JSON Schema: 1.0 is an integer; True is not.
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    raise _Unsupported(name)


def _compile(schema: Any) -> Predicate:
    if schema is True or schema == {}:
        return lambda value: True
    if not isinstance(schema, Mapping) or set(schema) - _SUPPORTED:
        raise _Unsupported(schema)
    checks: list[Predicate] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        for k in kinds:
            _is_type(None, k)  # raises on an unknown type name
        checks.append(lambda v, kinds=kinds: any(_is_type(v, k) for k in kinds))
    if "enum" in schema:
        allowed = list(schema["enum"])
        checks.append(lambda v: any(v == a and type(v) is type(a) for a in allowed))
    if "const" in schema:
        const = schema["const"]
        checks.append(lambda v: v == const and type(v) is type(const))
    if "minLength" in schema or "maxLength" in schema or "pattern" in schema:
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        rx = re.compile(schema["pattern"]) if "pattern" in schema else None

        def text(v: Any) -> bool:
            if not isinstance(v, str):
                return True
            if len(v) < lo or (hi is not None and len(v) > hi):
                return False
            return rx is None or rx.search(v) is not None

        checks.append(text)
    if "minimum" in schema or "maximum" in schema:
        lo_n, hi_n = schema.get("minimum"), schema.get("maximum")

        def number(v: Any) -> bool:
            if isinstance(v, bool) or not isinstance(v, int | float):
                return True
            return (lo_n is None or v >= lo_n) and (hi_n is None or v <= hi_n)

        checks.append(number)
    if "items" in schema or "minItems" in schema or "maxItems" in schema:
        item = _compile(schema.get("items", True))
        lo_i, hi_i = schema.get("minItems", 0), schema.get("maxItems")

        def array(v: Any) -> bool:
            if not isinstance(v, list):
                return True
            if len(v) < lo_i or (hi_i is not None and len(v) > hi_i):
                return False
            return all(item(x) for x in v)

        checks.append(array)
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        props = {k: _compile(s) for k, s in schema.get("properties", {}).items()}
        required = list(schema.get("required", []))
        extra = schema.get("additionalProperties", True)
        if extra not in (True, False):
            raise _Unsupported(extra)

        def obj(v: Any) -> bool:
            if not isinstance(v, dict):
                return True
            if any(r not in v for r in required):
                return False
            for key, value in v.items():
                check = props.get(key)
                if check is None:
                    if extra is False:
                        return False
                elif not check(value):
                    return False
            return True

        checks.append(obj)
    return lambda v: all(c(v) for c in checks)


def compile_schema(schema: Mapping[str, Any]) -> Predicate | None:
    try:
        return _compile(schema)
    except (_Unsupported, re.error, TypeError):
        return None
