"""``RunState.fork``: the copy a commit changes must share nothing it could change with the state
it was made from (a commit that loses its race is dropped, and the state it came from is used
again)."""

from __future__ import annotations

from runs.domain.state import RunState

# Every container a step may change holds something, nested where the field allows.
FIELDS = {
    "run_id": "r1",
    "subject": "alice",
    "goal": "g",
    "max_steps": 5,
    "max_tool_calls": 5,
    "max_repeated_proposal": 2,
    "deadline_ms": 10,
    "pending_proposal": {"tool_name": "t", "arguments": {"path": ["a", {"b": 1}]}},
    "citations": ["o1"],
    "loop_guard": {"fp": {"n": 1, "k": 0, "p": 1, "t": 1}},
    "tool_policy": {"tools": {"t": {"mode": "confirm", "constraints": {"x": [1]}}}},
}


def test_a_fork_equals_its_state_and_changing_it_in_place_leaves_the_state_alone() -> None:
    state = RunState.model_validate(FIELDS)
    before = state.model_dump()
    fork = state.fork()
    assert fork == state
    assert fork.pending_proposal is not None
    fork.pending_proposal["arguments"]["path"][1]["b"] = 2
    fork.citations.append("o2")
    fork.loop_guard["fp"]["n"] = 9
    fork.loop_guard["other"] = {"n": 1, "k": 0, "p": 1, "t": 2}
    fork.tool_policy["tools"]["t"]["constraints"]["x"].append(2)
    fork.step = 3
    assert state.model_dump() == before
