"""policy.domain.strict_json: the one reader of JSON from outside (issue 21 items 8 and 9).

A text with no single meaning (a key twice, NaN) and a value no JSON column stores (a NUL, a lone
surrogate) are refused, each with its stable code; plain JSON reads as ``json.loads`` reads it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from policy.domain import strict_json
from policy.domain.strict_json import JsonRefused


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"goal": "first", "goal": "second"}', strict_json.DUPLICATE_KEY),
        ('[{"a": {"b": 1, "b": 1}}]', strict_json.DUPLICATE_KEY),  # same value: still twice
        ('{"a": NaN}', strict_json.NON_FINITE_NUMBER),
        ("[Infinity]", strict_json.NON_FINITE_NUMBER),
        ("[-Infinity]", strict_json.NON_FINITE_NUMBER),
        ("[1e999]", strict_json.NON_FINITE_NUMBER),  # overflows to inf: not NaN, still refused
        ('["a\\u0000b"]', strict_json.NUL_CHARACTER),
        ('{"a\\u0000": 1}', strict_json.NUL_CHARACTER),
        ('["\\ud800"]', strict_json.INVALID_UNICODE),
        ('{"\\udfff": 1}', strict_json.INVALID_UNICODE),
        ("[" * 66 + "]" * 66, strict_json.VALUE_TOO_DEEP),
        ("[" * 100_000 + "]" * 100_000, strict_json.VALUE_TOO_DEEP),
        ("[" + "9" * 5000 + "]", strict_json.NUMBER_OUT_OF_RANGE),
        ("[9007199254740993]", strict_json.NUMBER_OUT_OF_RANGE),  # 2**53 + 1: no double is it
        ('{"a": 1,}', strict_json.NOT_JSON),
        ("", strict_json.NOT_JSON),
        (b'{"a": "\xff"}', strict_json.INVALID_UNICODE),
    ],
)
def test_refused_with_its_code(text: str | bytes, code: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        strict_json.loads(text)
    assert refused.value.code == code


def test_a_duplicate_key_is_named_printably() -> None:
    with pytest.raises(JsonRefused) as refused:
        strict_json.parse('{"a\\u0000\\n": 1, "a\\u0000\\n": 2}')
    assert refused.value.extra == {"key": "a\\x00\\n"}
    assert "\x00" not in refused.value.message


@pytest.mark.parametrize(
    "text",
    [
        '{"goal": "g", "nested": {"goal": "g"}}',  # one key in two objects: not a duplicate
        '[{"a": 1}, {"a": 1}]',
        '{"literal": "\\\\u0000"}',  # a backslash, then "u0000": text, not a NUL
        '{"pair": "\\ud83d\\ude00", "n": 1.5, "i": -0, "big": 9007199254740991}',
        "[" * 65 + "]" * 65,  # 64 levels below the top one
        "  [true, false, null]  ",
    ],
)
def test_plain_json_reads_as_json_loads_reads_it(text: str) -> None:
    assert strict_json.loads(text) == json.loads(text)
    assert strict_json.loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ({"a": float("nan")}, strict_json.NON_FINITE_NUMBER),
        (["\x00"], strict_json.NUL_CHARACTER),
        ({"\ud800": 1}, strict_json.INVALID_UNICODE),
        ({"a": (1, 2)}, "NOT_JSON_VALUE"),
    ],
)
def test_check_refuses_a_parsed_value(value: Any, code: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        strict_json.check(value)
    assert refused.value.code == code
