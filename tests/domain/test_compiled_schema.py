"""The compiled fast path agrees with jsonschema on *whether* input is valid, for every built-in
tool schema and a plugin-style one; the canonical shortcut gives the same proposal hash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from memory.domain.preferences import DEFAULT_KEYS, build_policies
from memory.tools import contract as memory_contract
from policy.domain.canonical import canonical, proposal_hash, proposal_hash_from_canonical
from policy.domain.schemas import compile_schema
from runs.tools import artifacts, search

SCHEMAS = [
    search.contract().input_schema,
    artifacts.contract().input_schema,
    memory_contract(build_policies(DEFAULT_KEYS)).input_schema,
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
            "mode": {"enum": ["a", "b"]},
            "flag": {"type": "boolean"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}$"},
        },
        "required": ["n"],
        "additionalProperties": False,
    },
]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-20, 20)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=12)
    | st.sampled_from(["a", "b", "AB", "run-output/x", "answer_language", "zh-CN"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
keys = st.sampled_from(
    ["query", "corpus", "limit", "path", "content", "key", "value", "expected_version",
     "n", "tags", "mode", "flag", "code", "other"]
)  # fmt: skip
instances = st.dictionaries(keys, json_values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, len(SCHEMAS) - 1), instance=instances)
def test_compiled_predicate_agrees_with_jsonschema(index, instance):
    schema = SCHEMAS[index]
    compiled = compile_schema(schema)
    assert compiled is not None
    assert compiled(instance) == Draft202012Validator(schema).is_valid(instance)


def test_unsupported_keywords_fall_back_to_jsonschema():
    assert compile_schema({"type": "object", "oneOf": [{"required": ["a"]}]}) is None
    assert compile_schema({"type": "object", "additionalProperties": {"type": "string"}}) is None


@settings(max_examples=200, deadline=None)
@given(
    name=st.text(min_size=1, max_size=8), version=st.text(min_size=1, max_size=4), args=instances
)
def test_hash_from_canonical_text_equals_proposal_hash(name, version, args):
    assert proposal_hash_from_canonical(name, version, canonical(args)) == proposal_hash(
        name, version, args
    )
