"""The JSON-path diff the queue shows against the last approved call
(policy.domain.confirmation.json_diff)."""

from __future__ import annotations

from policy.domain.confirmation.json_diff import MAX_CHANGES, json_diff


def changes(before, after):
    return [(c.path, c.kind, c.before, c.after) for c in json_diff(before, after).changes]


def test_equal_values_have_no_changes():
    assert json_diff({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]}).same


def test_changed_added_and_removed_keys_by_path():
    assert changes({"a": 1, "b": 2}, {"a": 3, "c": 4}) == [
        ("$.a", "changed", "1", "3"),
        ("$.b", "removed", "2", ""),
        ("$.c", "added", "", "4"),
    ]


def test_nested_paths_and_array_indexes():
    assert changes({"to": ["x", "y"]}, {"to": ["x", "z", "w"]}) == [
        ("$.to[1]", "changed", '"y"', '"z"'),
        ("$.to[2]", "added", "", '"w"'),
    ]


def test_types_stay_visible():
    assert changes({"n": 7}, {"n": "7"}) == [("$.n", "changed", "7", '"7"')]
    assert changes({"n": 1}, {"n": True}) == [("$.n", "changed", "1", "true")]
    assert changes({"n": 1}, {"n": 1.0}) == [("$.n", "changed", "1", "1.0")]


def test_odd_keys_are_quoted():
    assert changes({}, {"a b": 1})[0][0] == '$["a b"]'


def test_a_long_diff_says_how_many_more():
    diff = json_diff({}, {f"k{i:03d}": i for i in range(MAX_CHANGES + 7)})
    assert len(diff.changes) == MAX_CHANGES
    assert diff.more == 7
    assert not diff.same
