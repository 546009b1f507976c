"""The input schema's yes/no, answered by a compiled Draft 2020-12 validator.

Every proposal is validated against its tool's input schema; python-jsonschema alone costs more
than the rest of the gate together (measured with ``make bench``), so the verdict comes from
``jsonschema_rs`` (a conforming Draft 2020-12 validator in Rust) and python-jsonschema is asked
only *why* an input failed, for the stable violation code.

The two agree on every keyword tool contracts use (a property test over generated schemas and values
pins it, tests/domain/policy_domain/test_schema_equivalence.py) except one: ``pattern``. JSON Schema
says ECMA-262 regular expressions, and jsonschema_rs follows it; python-jsonschema uses Python's
``re``, which is looser (``$`` also matches before a final newline, ``\\d`` matches any Unicode
digit). So for a schema with a ``pattern`` anywhere the input must satisfy *both*: the verdict is
never looser than either validator.

The hand-written predicate that used to live here compared ``enum``/``const`` with Python
``==`` and accepted ``[true]`` for ``enum: [[1]]``: it is gone (issue 9 item 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema_rs


def compile_verdict(schema: Mapping[str, Any]) -> jsonschema_rs.Validator:
    """The compiled yes/no for ``schema``; raises ``ValueError`` if jsonschema_rs refuses it."""
    return jsonschema_rs.Draft202012Validator(dict(schema))


def uses_pattern(schema: Any) -> bool:
    """Whether a regex keyword (``pattern``, ``patternProperties``) appears anywhere in the schema
    (see the module doc); a property merely named "pattern" also counts, which only costs time."""
    if isinstance(schema, Mapping):
        if "pattern" in schema or "patternProperties" in schema:
            return True
        return any(uses_pattern(v) for v in schema.values())
    if isinstance(schema, list):
        return any(uses_pattern(v) for v in schema)
    return False


def first_error(validator: jsonschema_rs.Validator, value: Any) -> tuple[str, str] | None:
    """(keyword, instance path) of jsonschema_rs's first error, or None when it accepts."""
    for error in validator.iter_errors(value):
        name = type(error.kind).__name__
        keyword = name[:1].lower() + name[1:]
        return keyword, ".".join(str(p) for p in error.instance_path)
    return None
