"""The input schema's verdict: jsonschema_rs (fast) must agree with python-jsonschema (which names
the violation) on generated schemas *and* values, including nested bool/int/float, 1.0 and
enum/const of arrays and objects. Where the two regex dialects differ (``pattern``), the gate asks
both, so it is never looser than either (issue 9 item 2)."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from memory.domain.preferences import DEFAULT_KEYS, build_policies
from memory.tools import contract as memory_contract
from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContract
from policy.domain.outcomes import ToolOutcome
from policy.domain.registry import RegisteredTool
from runs.tools import artifacts, search

# ---- values: every JSON type, with the spellings Python == confuses -----------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.sampled_from([0, 1, -1, 2, 1.0, 0.0, -0.0, 1.5, 2.0, 10, 10.0, 1e300, -(2**53 - 1)])
    | st.integers(-20, 20)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from(["", "a", "ab", "abc", "é", "\U0001f600", "a\n", "12", "x" * 9])
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)

# ---- schemas: the keyword subset tool contracts use ---------------------------------------------

_TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]
_leaf_constraints = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(_TYPES)
        | st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True),
        "minLength": st.integers(0, 3),
        "maxLength": st.integers(0, 4),
        "minimum": st.sampled_from([0, 1, 1.0, -1.5, 2]),
        "maximum": st.sampled_from([0, 1, 1.0, 10, 2.5]),
        "enum": st.lists(json_values, min_size=1, max_size=3),
        "const": json_values,
    },
)


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", "array"]),
            "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=3),
            "required": st.lists(st.sampled_from(["a", "b", "c", "x"]), max_size=2, unique=True),
            "additionalProperties": st.booleans(),
            "items": children,
            "minItems": st.integers(0, 2),
            "maxItems": st.integers(0, 3),
            "enum": st.lists(json_values, min_size=1, max_size=3),
            "const": json_values,
        },
    )


schemas = st.recursive(_leaf_constraints, _extend, max_leaves=6)


def _respell(value: Any, flip: int) -> Any:
    """A value the schema names, respelled: 1 <-> 1.0 <-> True, recursively."""
    if isinstance(value, bool):
        return int(value) if flip % 2 else value
    if isinstance(value, int):
        return float(value) if flip % 3 == 0 else (value == 1 if value in (0, 1) else value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return [_respell(v, flip + i) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _respell(v, flip + 1) for k, v in value.items()}
    return value


def _named_values(schema: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(schema, dict):
        out.extend(schema.get("enum", []))
        if "const" in schema:
            out.append(schema["const"])
        for sub in [*schema.get("properties", {}).values(), schema.get("items")]:
            out.extend(_named_values(sub))
    return out


def _agree(schema: dict[str, Any], value: Any) -> None:
    fast = jsonschema_rs.Draft202012Validator(schema).is_valid(value)
    slow = Draft202012Validator(schema).is_valid(value)
    assert fast == slow, (schema, value)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, value=json_values, data=st.data())
def test_jsonschema_rs_verdict_equals_python_jsonschema(schema, value, data):
    """issue 9 item 2: on every pattern-free schema of the subset, the fast verdict is exactly
    python-jsonschema's, for random values and for respelled enum/const members."""
    _agree(schema, value)
    named = _named_values(schema)
    if named:
        member = data.draw(st.sampled_from(named))
        flip = data.draw(st.integers(0, 5))
        _agree(schema, member)
        _agree(schema, _respell(member, flip))
        _agree(schema, {"a": _respell(member, flip), "b": [member]})


@pytest.mark.parametrize(
    ("schema", "value", "valid"),
    [
        ({"enum": [[1]]}, [True], False),
        ({"enum": [[1]]}, [1.0], True),
        ({"const": {"admin": 1}}, {"admin": True}, False),
        ({"const": {"admin": 1}}, {"admin": 1.0}, True),
        ({"enum": [1]}, True, False),
        ({"const": False}, 0, False),
        ({"const": [0]}, [False], False),
        ({"type": "integer"}, 1.0, True),
        ({"type": "integer"}, True, False),
        ({"type": "number"}, False, False),
        ({"maximum": 1}, True, True),  # maximum ignores non-numbers, in both
    ],
)
def test_json_types_at_every_depth(schema, value, valid):
    assert jsonschema_rs.Draft202012Validator(schema).is_valid(value) is valid
    assert Draft202012Validator(schema).is_valid(value) is valid


# ---- through the registry -----------------------------------------------------------------------


def _tool(input_schema: dict[str, Any]) -> RegisteredTool:
    return RegisteredTool(
        ToolContract(
            name="probe",
            version="1",
            description="schema probe",
            input_schema=input_schema,
            output_schema={"type": "object"},
            required_capabilities=(),
            side_effect=SideEffect.READ,
            confirmation=ConfirmationMode.NEVER,
            timeout_ms=1_000,
            execute=lambda args, ctx: ToolOutcome.succeeded({}),
        )
    )


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


def test_registry_refuses_true_where_enum_of_arrays_names_1():
    """issue 9 item 2: the hand-written fast path accepted [true] for enum [[1]]."""
    tool = _tool(_object(v={"enum": [[1], {"admin": 1}]}))
    for bad in ([True], {"admin": True}, [[1]]):
        violation = tool.input_violation({"v": bad})
        assert violation is not None
        assert violation.code == "INVALID_INPUT_VALUE"
    assert tool.input_violation({"v": [1.0]}) is None
    assert tool.input_violation({"v": {"admin": 1}}) is None


@pytest.mark.parametrize(("pattern", "value"), [("^[a-z]+$", "abc\n"), (r"^\d+$", "\u0661\u0662")])
def test_pattern_is_checked_by_both_dialects(pattern, value):
    """Python's re accepts these; ECMA-262 (what JSON Schema specifies) does not. The gate
    refuses: it is never looser than either validator."""
    assert Draft202012Validator({"pattern": pattern}).is_valid(value)
    assert not jsonschema_rs.Draft202012Validator({"pattern": pattern}).is_valid(value)
    violation = _tool(_object(v={"type": "string", "pattern": pattern})).input_violation(
        {"v": value}
    )
    assert violation is not None
    assert (violation.code, violation.field) == ("INVALID_INPUT_VALUE", "v")


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.sampled_from(["^[a-z]+$", r"^\d+$", "^a", "b$", "^[A-Z]{2}$", "."]),
    value=st.text(alphabet="abAB12\n\u0661 ", max_size=5),
)
def test_registry_verdict_with_pattern_is_the_stricter_of_both(pattern, value):
    schema = {"type": "string", "pattern": pattern}
    both = jsonschema_rs.Draft202012Validator(schema).is_valid(value) and Draft202012Validator(
        schema
    ).is_valid(value)
    assert (_tool(_object(v=schema)).input_violation({"v": value}) is None) is both


BUILT_IN = [
    search.contract(),
    artifacts.contract(),
    memory_contract(build_policies(DEFAULT_KEYS)),
]
_keys = st.sampled_from(
    ["query", "corpus", "limit", "path", "content", "key", "value", "expected_version", "other"]
)


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(0, len(BUILT_IN) - 1),
    instance=st.dictionaries(_keys, json_values, max_size=4),
)
def test_registry_verdict_equals_python_jsonschema_on_built_in_tools(index, instance):
    contract = BUILT_IN[index]
    verdict = RegisteredTool(contract).input_violation(instance) is None
    assert verdict == Draft202012Validator(contract.input_schema).is_valid(instance)
