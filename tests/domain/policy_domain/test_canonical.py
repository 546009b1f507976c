"""Canonical JSON and hashes: golden vectors pin the scheme, properties pin its invariants."""

from __future__ import annotations

import hashlib
import json
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.domain.canonical import (
    HASH_SCHEME,
    arguments_hash,
    canonical,
    content_hash,
    idempotency_token,
    json_equal,
    per_run_confirmation_hash,
    proposal_hash,
    proposal_hash_from_canonical,
    sha256_hex,
)
from policy.domain.errors import CanonicalError, ParseError
from policy.domain.proposals import parse_planner_output

# ---- golden vectors ----------------------------------------------------------------------------

GOLDEN: list[tuple[Any, str, str]] = [
    (
        {"b": {"d": "x", "c": [True, False, None]}, "a": 1},
        '{"a":1,"b":{"c":[true,false,null],"d":"x"}}',
        "5c8357ad01b7a1da1950445edb5b797bf0da2268e79ecac4f9df1da3ed76c830",
    ),
    (
        {"name": "é", "msg": "重试"},
        '{"msg":"重试","name":"é"}',
        "104911af2336ed592e37062b1822b7077ec7c081c13566586c92fe1890c5adde",
    ),
    (0, "0", "5feceb66ffc86f38d952786c6d696c79c2dbc239dd4e91b46729d73a27fb57e9"),
    (-17, "-17", "d3471dcc109cd382f5e09a64253c2219958b5f8f07371fba48ac81fed97bb18a"),
    (1.5, "1.5", "9f29a130438b81170b92a42650f9a94291ecad60bd47af2a3886e75f7f728725"),
    (0.1, "0.1", "14be4b45f18e0d8c67b4f719b5144eee88497e413709d11d85b096d8e2346310"),
    (True, "true", "b5bea41b6c623f7c09f1bf24dcae58ebab3c0cdd90ad966bc43a45b44867e12b"),
    (False, "false", "fcbcf165908dd18a9e49f7ff27810176db8e9f63b4352213741664245224f8aa"),
    (None, "null", "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"),
    ("é", '"é"', "f2886017e9c7abacf804b54d64787dce2b611c9544ba21f3affdd126a6e50086"),
    ([], "[]", "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"),
    ({}, "{}", "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
]


# Values whose c1 text differs from c2: c1 must keep reading exactly as before (stored rows).
C1_ONLY: list[tuple[Any, str, str, str]] = [
    (
        {"a": 1.0},
        '{"a":1.0}',
        "c29a44abc114a1d75486434c013102c9e736f526b4fd19658d9492b7b224de6d",
        '{"a":1}',
    ),
    (
        {"a": -0.0},
        '{"a":-0.0}',
        "952b7dc455870c265da6a6fb15ef60891abf562f0e3327f095914610b3d00811",
        '{"a":0}',
    ),
    (
        1e-06,
        "1e-06",
        "1187132475a4431d8ce6b306fecd75b877993db3279c7769716dacb5ed57e6b7",
        "0.000001",
    ),
    (1e-07, "1e-07", "e485fac25775a7da830698e7daac582737fc8b43ba4b351467a16cf8ed83122a", "1e-7"),
]


def test_hash_scheme_is_pinned():
    assert HASH_SCHEME == "c2"


@pytest.mark.parametrize("scheme", ["c1", "c2"])
@pytest.mark.parametrize(("value", "text", "digest"), GOLDEN)
def test_golden_canonical_text_and_hash(value, text, digest, scheme):
    # These values are spelled alike in both schemes: the same text and digest in each.
    assert canonical(value, scheme) == text
    assert content_hash(value, scheme) == digest
    assert sha256_hex(text) == digest
    assert sha256_hex(text.encode("utf-8")) == digest
    assert content_hash(value) == digest  # the default scheme


@pytest.mark.parametrize(("value", "c1_text", "c1_digest", "c2_text"), C1_ONLY)
def test_c1_still_reads_as_before_and_c2_differs(value, c1_text, c1_digest, c2_text):
    """issue 9 item 3: a stored c1 hash can still be verified after c2 became the default."""
    assert canonical(value, "c1") == c1_text
    assert content_hash(value, "c1") == c1_digest
    assert canonical(value, "c2") == c2_text
    assert canonical(value) == c2_text


def test_unknown_scheme_is_refused():
    with pytest.raises(CanonicalError) as exc:
        canonical({}, "c9")
    assert exc.value.code == "UNKNOWN_HASH_SCHEME"


# ---- RFC 8785 published vectors ------------------------------------------------------------------

# RFC 8785 Appendix B: IEEE 754 bit patterns and their JCS spelling.
RFC8785_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),  # minus zero
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), RFC8785_NUMBERS)
def test_rfc8785_appendix_b_numbers(bits, text):
    """issue 9 item 3: numbers are spelled as RFC 8785 says (Appendix B)."""
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical(value) == text
    assert canonical({"n": value}) == f'{{"n":{text}}}'


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_appendix_b_nan_and_infinity_are_refused(bits):
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    with pytest.raises(CanonicalError) as exc:
        canonical(value)
    assert exc.value.code == "NON_FINITE_NUMBER"


@pytest.mark.parametrize(
    ("source", "text"),
    [("1E30", "1e+30"), ("4.50", "4.5"), ("2e-3", "0.002"), ("0.000001", "0.000001"),
     ("1e-7", "1e-7"), ("1.0", "1"), ("-0.0", "0"), ("0.000000000000000000000000001", "1e-27"),
     ("333333333.33333329", "333333333.3333333"), ("100", "100"), ("-17", "-17")],
)  # fmt: skip
def test_rfc8785_number_serialisation(source, text):
    assert canonical(json.loads(source)) == text


RFC_3_2_2_SOURCE = r"""{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"""
RFC_3_2_2_CANONICAL = (
    r'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"\u20ac$'
    r"\u000f\nA"
    "'"
    r'B\"\\\\\"/"}'
)


def test_rfc8785_section_3_2_2_example():
    """issue 9 item 3: the RFC's worked example (numbers, string escapes, literals)."""
    assert canonical(json.loads(RFC_3_2_2_SOURCE)) == RFC_3_2_2_CANONICAL


def test_rfc8785_section_3_2_3_sorting_example():
    """issue 9 item 3: keys sorted by UTF-16 code units (the RFC's own example)."""
    source = json.loads(
        r'{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet '
        r'With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", '
        r'"\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}'
    )
    assert [source[k] for k in json.loads(canonical(source))] == [
        "Carriage Return",
        "One",
        "Control",
        "Latin Small Letter O With Diaeresis",
        "Euro Sign",
        "Emoji: Grinning Face",
        "Hebrew Letter Dalet With Dagesh",
    ]
    # Code point order (c1) puts the emoji last: the two schemes really differ here.
    assert list(json.loads(canonical(source, "c1")))[-1] == "\U0001f600"


def test_golden_proposal_hash():
    # Pinned independently: the smoke run's trace shows the same hash for this search.
    assert (
        proposal_hash("search_public", "1", {"query": "重试耗尽后怎么办"})
        == "44a31159ea04f581bec1b16d1193eb4387f24fdc381a116975fe5814b0d6ef6d"
    )
    assert (
        proposal_hash("save_preference", "1", {"value": "zh", "key": "answer_language"})
        == "c3190b941489a2ece9de20ae3989dc82ef406f7a94974cbbde42a07beecfd861"
    )


def test_golden_per_run_confirmation_hash():
    assert (
        per_run_confirmation_hash("save_preference", "1")
        == "055f48eb2d0856cdaa77a5a50b908adf5eb70fd258910215c6a0b33eb26777d6"
    )


def test_golden_idempotency_token():
    args_hash = arguments_hash({"value": "zh", "key": "answer_language"})
    assert args_hash == "32c2a9009740caf8d732ea7da893181a06c8b296435ef323b7a5487aa68dff28"
    token = idempotency_token("run-1", "p1", "1", args_hash)
    assert token == "707968c22ead905db403aa95e3f82f94bdddc2c1bfabc9274a99c233dc04bb85"
    assert token == hashlib.sha256(f"run-1:p1:1:{args_hash}".encode()).hexdigest()


def test_unicode_is_kept_raw_not_escaped():
    text = canonical({"k": "重试 é"})
    assert "\\u" not in text
    assert text == '{"k":"重试 é"}'


def test_keys_sorted_at_every_depth():
    value = {"b": [{"z": 1, "a": 2}], "B": 0, "a": {"é": 1, "e": 2}}
    for scheme in ("c1", "c2"):
        assert canonical(value, scheme) == '{"B":0,"a":{"e":2,"é":1},"b":[{"a":2,"z":1}]}'


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [(1, 1.0, True), (-0.0, 0, True), ({"a": 1, "b": 2}, {"b": 2, "a": 1.0}, True),
     (True, 1, False), ({"admin": True}, {"admin": 1}, False), ([True], [1], False),
     ([[1]], [[True]], False), (False, 0, False), (None, False, False), ("1", 1, False),
     ([1, 2], [2, 1], False), ({"a": None}, {}, False), (float("nan"), float("nan"), False)],
)  # fmt: skip
def test_json_equal_compares_by_json_type_at_every_depth(a, b, equal):
    """issue 9 item 2: JSON equality, not Python ==."""
    assert json_equal(a, b) is equal
    assert json_equal(b, a) is equal


@pytest.mark.parametrize(
    ("value", "text"),
    [(2**53 - 1, "9007199254740991"), (-(2**53 - 1), "-9007199254740991"),
     (10**20, "100000000000000000000"), (10**21, "1e+21"), (2**60, "1152921504606847000"),
     (1152921504606847000, "1152921504606847000")],
)  # fmt: skip
def test_large_integers_are_the_double_they_name(value, text):
    """issue 9 item 3: an int beyond 2**53 is accepted only when it names one double (it is
    that double, or that double's RFC 8785 spelling, as a JSON column gives a large float back)."""
    assert canonical(value) == text
    assert canonical(float(value)) == text
    assert canonical(json.loads(text)) == text


@pytest.mark.parametrize("value", [2**53 + 1, -(2**53 + 1), 2**63 + 1, 10**400, {"a": [2**53 + 1]}])
def test_integers_that_need_rounding_are_refused_by_c2(value):
    with pytest.raises(CanonicalError) as exc:
        canonical(value)
    assert exc.value.code == "NUMBER_OUT_OF_RANGE"
    canonical(value, "c1")  # c1 never refused them; stored c1 rows stay readable


def test_bool_and_int_are_distinct():
    assert canonical({"v": True}) != canonical({"v": 1})
    assert proposal_hash("t", "1", {"v": True}) != proposal_hash("t", "1", {"v": 1})


# ---- rejected values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (float("nan"), "NON_FINITE_NUMBER"),
        (float("inf"), "NON_FINITE_NUMBER"),
        (float("-inf"), "NON_FINITE_NUMBER"),
        ({"a": [1, {"b": float("nan")}]}, "NON_FINITE_NUMBER"),
        ((1, 2), "NOT_JSON_VALUE"),
        ({"a": (1,)}, "NOT_JSON_VALUE"),
        ({1: "x"}, "NON_STRING_KEY"),
        ({"a": {None: 1}}, "NON_STRING_KEY"),
        ({"a": {1.5: 1}}, "NON_STRING_KEY"),
        ({"s": {1, 2}}, "NOT_JSON_VALUE"),
        (b"bytes", "NOT_JSON_VALUE"),
    ],
)
def test_non_json_values_rejected_with_code(value, code):
    with pytest.raises(CanonicalError) as exc:
        canonical(value)
    assert exc.value.code == code
    with pytest.raises(CanonicalError):
        proposal_hash("t", "1", value)


def test_too_deep_value_rejected():
    value: Any = "leaf"
    for _ in range(100):
        value = [value]
    with pytest.raises(CanonicalError) as exc:
        canonical(value)
    assert exc.value.code == "VALUE_TOO_DEEP"


def test_lone_surrogate_is_not_hashable_json():
    # json.loads accepts "\ud800" (a lone surrogate escape), so planner output can carry one.
    # It is not valid UTF-8: canonical must refuse it with a CanonicalError (a stable code),
    # not hand back text that later crashes sha256 with a UnicodeEncodeError.
    value = json.loads('{"q": "\\ud800"}')
    with pytest.raises(CanonicalError):
        content_hash(value)


def test_lone_surrogate_in_planner_output_is_a_parse_error():
    raw = json.loads(
        '{"kind": "tool", "proposal_id": "p1", "tool_name": "search_public", '
        '"tool_version": "1", "arguments": {"query": "\\ud800"}}'
    )
    with pytest.raises(ParseError):
        parse_planner_output(raw)


# ---- properties --------------------------------------------------------------------------------

_SAFE = 2**53 - 1
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-_SAFE, max_value=_SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=4), json_values, min_size=1, max_size=4)


def _respelled(value: Any, rnd: random.Random, *, numbers: bool = True) -> Any:
    """The same JSON value, spelled differently: key order and (with ``numbers``) 1 as 1.0,
    0 as -0.0."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: _respelled(value[k], rnd, numbers=numbers) for k in keys}
    if isinstance(value, list):
        return [_respelled(v, rnd, numbers=numbers) for v in value]
    if not numbers:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and rnd.random() < 0.5:
        return -0.0 if value == 0 else float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _shuffled(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with its keys in another order."""
    return _respelled(value, rnd, numbers=False)


@settings(max_examples=100, deadline=None)
@given(value=json_values, rnd=st.randoms(use_true_random=False))
def test_key_order_never_changes_canonical_or_hash(value, rnd):
    other = _shuffled(value, rnd)
    assert canonical(other) == canonical(value)
    assert content_hash(other) == content_hash(value)
    assert proposal_hash("tool", "1", other) == proposal_hash("tool", "1", value)


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_canonical_round_trips_through_json(value):
    text = canonical(value)
    assert canonical(json.loads(text)) == text


@settings(max_examples=100, deadline=None)
@given(
    name=st.text(min_size=1, max_size=10),
    other_name=st.text(min_size=1, max_size=10),
    version=st.text(min_size=1, max_size=4),
    other_version=st.text(min_size=1, max_size=4),
    args=json_objects,
)
def test_tool_name_or_version_change_changes_proposal_hash(
    name, other_name, version, other_version, args
):
    base = proposal_hash(name, version, args)
    if other_name != name:
        assert proposal_hash(other_name, version, args) != base
    if other_version != version:
        assert proposal_hash(name, other_version, args) != base


@settings(max_examples=100, deadline=None)
@given(args=json_objects, data=st.data())
def test_any_argument_value_change_changes_proposal_hash(args, data):
    key = data.draw(st.sampled_from(sorted(args)))
    new_value = data.draw(json_values.filter(lambda v: canonical(v) != canonical(args[key])))
    changed = {**args, key: new_value}
    assert proposal_hash("tool", "1", changed) != proposal_hash("tool", "1", args)
    assert arguments_hash(changed) != arguments_hash(args)


@settings(max_examples=100, deadline=None)
@given(args=json_objects, extra_key=st.text(max_size=6), extra=json_values)
def test_adding_an_argument_changes_proposal_hash(args, extra_key, extra):
    if extra_key in args:
        return
    assert proposal_hash("tool", "1", {**args, extra_key: extra}) != proposal_hash(
        "tool", "1", args
    )


@settings(max_examples=100, deadline=None)
@given(value=json_objects)
def test_escaped_and_raw_unicode_json_give_same_hash(value):
    escaped = json.loads(json.dumps(value, ensure_ascii=True))
    raw = json.loads(json.dumps(value, ensure_ascii=False))
    assert proposal_hash("t", "1", escaped) == proposal_hash("t", "1", raw)
    assert canonical(escaped) == canonical(raw)


def test_escaped_and_raw_unicode_json_example():
    escaped = json.loads('{"q": "\\u91cd\\u8bd5", "n": "\\u00e9"}')
    raw = json.loads('{"n": "é", "q": "重试"}')
    assert proposal_hash("search_public", "1", escaped) == proposal_hash("search_public", "1", raw)


_ids = st.text(min_size=1, max_size=16)
_hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@settings(max_examples=100, deadline=None)
@given(
    parts=st.tuples(_ids, _ids, _ids, _hashes),
    index=st.integers(min_value=0, max_value=3),
    replacement=st.one_of(_ids, _hashes),
)
def test_idempotency_token_stable_and_sensitive(parts, index, replacement):
    token = idempotency_token(*parts)
    assert idempotency_token(*parts) == token  # stable across retries and recovery
    assert len(token) == 64
    changed = list(parts)
    changed[index] = replacement
    if replacement != parts[index]:
        assert idempotency_token(*changed) != token


_astral_keys = st.text(
    alphabet=st.sampled_from(
        ["a", "\r", "1", "\u0080", "\u00f6", "\u20ac", "\ufb33", "\U0001f600"]
    ),
    max_size=3,
)
jcs_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(_astral_keys, children, max_size=4)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(value=jcs_values)
def test_c2_is_exactly_rfc8785(value):
    """issue 9 item 3: the json.dumps fast path never differs from the rfc8785 package."""
    import rfc8785

    assert canonical(value, "c2") == rfc8785.dumps(value).decode("utf-8")


@settings(max_examples=300, deadline=None)
@given(args=json_objects, rnd=st.randoms(use_true_random=False))
def test_loop_fingerprint_ignores_the_spelling_of_a_json_value(args, rnd):
    """issue 9 item 3: 1 vs 1.0, -0.0 vs 0 and key order give one proposal hash (the loop
    fingerprint), so a planner cannot respell a number to slip past the loop guard."""
    other = _respelled(args, rnd)
    assert proposal_hash("tool", "1", other) == proposal_hash("tool", "1", args)
    assert json_equal(other, args)


def test_respelled_numbers_hash_alike_example():
    assert proposal_hash("t", "1", {"n": 1, "z": -0.0}) == proposal_hash(
        "t", "1", {"z": 0, "n": 1.0}
    )
    assert canonical({"n": 1}) == canonical({"n": 1.0})


@settings(max_examples=200, deadline=None)
@given(
    name=st.text(min_size=1, max_size=10),
    version=st.text(min_size=1, max_size=4),
    args=jcs_values,
)
def test_proposal_hash_shortcut_equals_proposal_hash(name, version, args):
    """The string-concatenation shortcut stays equal to the full hash under c2."""
    assert proposal_hash_from_canonical(name, version, canonical(args)) == proposal_hash(
        name, version, args
    )


def test_golden_proposal_hash_shortcut():
    args = {"n": 1.0, "\U0001f600": "x", "\ufb33": [0.000001]}
    expected = proposal_hash("save_preference", "1", args)
    assert proposal_hash_from_canonical("save_preference", "1", canonical(args)) == expected
    assert expected == sha256_hex(
        '{"arguments":{"n":1,"\ud83d\ude00":"x","\ufb33":[0.000001]},'
        '"toolName":"save_preference","toolVersion":"1"}'.encode("utf-16", "surrogatepass").decode(
            "utf-16"
        )
    )
