"""A person's edit as data (policy.domain.confirmation.edits): the diff against what they were
shown, applied to the real arguments; and the provenance of the values they typed. No database."""

from __future__ import annotations

from typing import Any

import pytest

from policy.domain.confirmation.approvers import ApproverNotAllowed, ApproverRule, Person
from policy.domain.confirmation.edits import (
    EditInvalid,
    diff,
    edited_arguments,
    path_text,
    pending_with_edit,
    split_edit,
)
from policy.domain.origins.provenance import EditedBy, compute, first_party
from policy.domain.origins.taint import UNTRUSTED, Entry, RunIndex, entry_seq, entry_text
from policy.domain.secrets.redaction import active_scanner
from runs.domain.machine import Status
from runs.domain.step import edits
from runs.domain.step.edits import edited_confirmation_id
from tests.domain.toolkit import final, grant, harness, tool

SECRET = "sk-live-abcdefghijklmnop1234"


def masked(value: Any) -> Any:
    return active_scanner().masked(value).value


def test_a_value_left_alone_keeps_its_real_secret_and_the_changed_one_is_typed() -> None:
    real = {"to": "ops@example.com", "headers": {"Authorization": f"Bearer {SECRET}"}, "n": 1}
    shown = masked(real)
    assert SECRET not in str(shown)  # what the person saw
    typed = {**shown, "to": "oncall@example.com"}
    arguments, changes = edited_arguments(real=real, shown=shown, typed=typed)
    assert arguments == {**real, "to": "oncall@example.com"}
    assert [c.as_json() for c in changes] == [
        {"path": "to", "op": "changed", "from": "ops@example.com", "to": "oncall@example.com"}
    ]


def test_a_changed_value_that_still_holds_the_tag_is_refused() -> None:
    real = {"body": f"token {SECRET} here"}
    shown = masked(real)
    typed = {"body": shown["body"].replace("here", "there")}
    with pytest.raises(EditInvalid) as caught:
        edited_arguments(real=real, shown=shown, typed=typed)
    assert (caught.value.code, caught.value.extra["path"]) == ("EDIT_KEEPS_MASK", "body")


@pytest.mark.parametrize(
    ("typed", "code"),
    [
        ([1], "EDIT_ARGUMENTS_INVALID"),
        ("x", "EDIT_ARGUMENTS_INVALID"),
        ({"a": 1}, "EDIT_UNCHANGED"),
    ],
)
def test_refusals(typed: Any, code: str) -> None:
    with pytest.raises(EditInvalid) as caught:
        edited_arguments(real={"a": 1}, shown={"a": 1}, typed=typed)
    assert caught.value.code == code


def test_diff_paths_types_and_lists() -> None:
    old = {"a": {"b": [1, 2]}, "c": True, "d": 1, "gone": "x"}
    new = {"a": {"b": [1, 3]}, "c": 1, "d": 1.0, "new": [1]}
    assert [(path_text(c.path), c.op) for c in diff(old, new)] == [
        ("a.b[1]", "changed"),
        ("c", "changed"),  # true is not 1
        ("gone", "removed"),
        ("new", "added"),
    ]  # 1 and 1.0 are one JSON number: no change
    assert [path_text(c.path) for c in diff({"l": [1]}, {"l": [1, 2]})] == ["l"]


def test_a_dotted_key_is_not_a_nested_path_for_provenance() -> None:
    """The person changed ``a.b`` (a nested value); a key spelled ``"a.b"`` is another leaf
    and stays as untrusted as the index says."""
    index = RunIndex()
    index.extend(
        [
            Entry(
                entry_seq(1, UNTRUSTED),
                "web-1",
                UNTRUSTED,
                entry_text({"from": "evil@attacker.example"}),
            )
        ]
    )
    arguments = {"a": {"b": "evil@attacker.example"}, "a.b": "evil@attacker.example"}
    people = first_party("send the report", [])
    edited = EditedBy(by="operator", paths=(("a", "b"),))
    provenance = compute(arguments, index=index, people=people, edited=edited)
    typed = [leaf for leaf in provenance.leaves if leaf.origins[0].kind == "edited"]
    assert [(leaf.argument, leaf.untrusted) for leaf in typed] == [("a", ())]
    assert provenance.tainted() == {"a.b": ("web-1",)}


def test_the_edit_rides_beside_the_proposal_and_comes_back() -> None:
    _, changes = edited_arguments(real={"v": "a"}, shown={"v": "a"}, typed={"v": "b"})
    pending = pending_with_edit(
        {"kind": "tool", "arguments": {"v": "b"}},
        by="operator",
        edited_from="run~c1",
        changes=changes,
    )
    raw, edited = split_edit(pending)
    assert raw == {"kind": "tool", "arguments": {"v": "b"}}
    assert edited == EditedBy(by="operator", paths=(("v",),))
    assert split_edit({"kind": "tool"}) == ({"kind": "tool"}, None)


def test_edited_confirmation_ids_are_minted_and_count_up() -> None:
    assert edited_confirmation_id("run_1~c3") == "run_1~c3~e1"
    assert edited_confirmation_id("run_1~c3~e1") == "run_1~c3~e2"


# --- the step function on the in-memory store (runs.domain.step.edits) ----------------------------


def waiting(**kw: Any) -> Any:
    """citation_style=footnote waits for a person (save_preference is confirmed per call)."""
    h = harness(
        [
            tool("p1", "save_preference", {"key": "citation_style", "value": "footnote"}),
            final("Saved.", ["tool-1"]),
        ],
        **kw,
    )
    state = h.advance()
    assert state.status is Status.WAITING_CONFIRMATION
    return h, state


def edit_to(h: Any, state: Any, value: str, **kw: Any) -> Any:
    cid = state.pending_confirmation_id
    return edits.edit(
        state,
        confirmation_id=cid,
        rule=ApproverRule.OWNER_OR_OPERATOR,
        shown_arguments=h.store.asked[cid]["arguments"],
        typed={"key": "citation_style", "value": value},
        by="operator",
        person=kw.pop("person", None),
        reason="she wants endnotes",
        facts=edits.EditFacts(
            grants=h.store.grants(h.run_id),
            confirmations=h.store.confirmations(h.run_id),
            registry=h.runner.registry,
            lookups=h.store.lookups(h.run_id),
            now_ms=h.clock.now_ms(),
        ),
    )


def test_the_edited_call_passes_the_gate_again_and_the_tool_gets_exactly_it() -> None:
    h, state = waiting()
    commit = edit_to(h, state, "endnote")
    new = commit.confirmation_request
    assert (new.approved, new.edited_from) == (True, state.pending_confirmation_id)
    assert commit.confirmation_decision == (
        state.pending_confirmation_id,
        "edited",
        "she wants endnotes",
    )
    h.store.apply(commit)
    done = h.advance()
    assert done.status is Status.COMPLETED
    assert h.kit.prefs == {"citation_style": "endnote"}
    assert h.kit.calls["save_preference"] == 1
    (started,) = h.events("tool.started")
    assert started["details"]["confirmation_id"] == new.confirmation_id


def test_an_edit_outside_the_grants_constraint_is_refused_with_the_gates_code() -> None:
    memory = grant("memory:write", constraints={"value": {"one_of": ["footnote", "endnote"]}})
    h, state = waiting(grants=[memory])
    with pytest.raises(edits.EditRefused) as caught:
        edit_to(h, state, "inline")
    assert (caught.value.code, caught.value.extra["layer"]) == (
        "CAPABILITY_CONSTRAINT_VIOLATED",
        "authorization",
    )
    assert h.state() == state  # nothing was written
    assert edit_to(h, state, "endnote").confirmation_request is not None


def test_who_may_edit_is_who_may_approve() -> None:
    h, state = waiting()
    owner_not_operator = Person(
        user_id=1, is_operator=False, is_run_owner=True, is_run_subject=True
    )
    cid = state.pending_confirmation_id
    with pytest.raises(ApproverNotAllowed):
        edits.edit(
            state,
            confirmation_id=cid,
            rule=ApproverRule.OPERATOR,
            shown_arguments=h.store.asked[cid]["arguments"],
            typed={"key": "citation_style", "value": "endnote"},
            by="alice",
            person=owner_not_operator,
            reason="",
            facts=edits.EditFacts(
                h.store.grants(h.run_id),
                h.store.confirmations(h.run_id),
                h.runner.registry,
                h.store.lookups(h.run_id),
                h.clock.now_ms(),
            ),
        )


def test_respond_is_a_trusted_note_and_a_new_step() -> None:
    h, state = waiting()
    commit = edits.respond(
        state,
        confirmation_id=state.pending_confirmation_id,
        rule=ApproverRule.OWNER_OR_OPERATOR,
        note="Use endnotes instead.",
        by="operator",
        person=None,
        tool_name="save_preference",
    )
    (note,) = commit.observations
    assert (note.kind.value, note.trust.value, note.content["note"]) == (
        "human-decision",
        "user",
        "Use endnotes instead.",
    )
    h.store.apply(commit)
    done = h.advance()
    assert done.step == state.step + 1  # the planner's next output: its final answer
    assert h.kit.calls["save_preference"] == 0
