"""Repeated-proposal detection: pure guard state, then whole runs through the Runner."""

from __future__ import annotations

import pytest

from policy.domain.canonical import proposal_hash
from policy.domain.contracts import PollingPolicy
from runs.domain.machine import Status
from runs.domain.step.loop_guard import MAX_TRACKED, observe
from tests.domain.toolkit import Toolkit, final, harness, tool

LOOP = "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION"

# ---- the pure guard ----------------------------------------------------------------------------


def test_count_grows_while_knowledge_is_unchanged():
    guard: dict = {}
    counts = []
    for _ in range(4):
        guard, verdict = observe(guard, "fp", knowledge_version=7, max_repeated=2, max_polls=None)
        counts.append((verdict.count, verdict.repeated))
    assert counts == [(1, False), (2, False), (3, True), (4, True)]


def test_new_knowledge_resets_the_count_but_not_the_polls():
    guard, _ = observe({}, "fp", knowledge_version=1, max_repeated=1, max_polls=None)
    guard, verdict = observe(guard, "fp", knowledge_version=2, max_repeated=1, max_polls=None)
    assert (verdict.count, verdict.polls, verdict.repeated) == (1, 2, False)
    guard, verdict = observe(guard, "fp", knowledge_version=2, max_repeated=1, max_polls=None)
    assert (verdict.count, verdict.repeated) == (2, True)


def test_polls_bounded_by_their_own_maximum_even_with_new_knowledge():
    guard: dict = {}
    verdicts = []
    for k in range(5):
        guard, verdict = observe(guard, "fp", knowledge_version=k, max_repeated=2, max_polls=3)
        verdicts.append(verdict.poll_limit)
    assert verdicts == [False, False, False, True, True]


def test_without_polling_policy_poll_limit_never_trips():
    guard: dict = {}
    for k in range(50):
        guard, verdict = observe(guard, "fp", knowledge_version=k, max_repeated=2, max_polls=None)
        assert not verdict.poll_limit
        assert not verdict.repeated


def test_fingerprints_are_counted_apart():
    guard: dict = {}
    for _ in range(2):
        guard, _ = observe(guard, "a", knowledge_version=1, max_repeated=2, max_polls=None)
    guard, verdict = observe(guard, "b", knowledge_version=1, max_repeated=2, max_polls=None)
    assert verdict.count == 1
    guard, verdict = observe(guard, "a", knowledge_version=1, max_repeated=2, max_polls=None)
    assert verdict.count == 3


def test_observe_is_pure():
    guard = {"fp": {"n": 1, "k": 1, "p": 1, "t": 1}}
    snapshot = {k: dict(v) for k, v in guard.items()}
    observe(guard, "fp", knowledge_version=1, max_repeated=2, max_polls=None)
    observe(guard, "other", knowledge_version=1, max_repeated=2, max_polls=None)
    assert guard == snapshot


def test_guard_stays_bounded_and_evicts_the_oldest_tick():
    guard: dict = {}
    for i in range(100):
        guard, _ = observe(guard, f"fp-{i}", knowledge_version=0, max_repeated=2, max_polls=None)
        assert len(guard) <= MAX_TRACKED
    assert len(guard) == MAX_TRACKED
    assert set(guard) == {f"fp-{i}" for i in range(100 - MAX_TRACKED, 100)}
    ticks = sorted(e["t"] for e in guard.values())
    assert ticks == list(range(ticks[0], ticks[0] + MAX_TRACKED))
    # Touching the oldest entry makes it the newest: the next eviction takes the next-oldest.
    oldest = f"fp-{100 - MAX_TRACKED}"
    guard, verdict = observe(guard, oldest, knowledge_version=0, max_repeated=2, max_polls=None)
    assert verdict.count == 2
    guard, _ = observe(guard, "fresh", knowledge_version=0, max_repeated=2, max_polls=None)
    assert oldest in guard
    assert f"fp-{101 - MAX_TRACKED}" not in guard
    assert len(guard) == MAX_TRACKED


def test_guard_state_is_json_friendly():
    guard, _ = observe({}, "fp", knowledge_version=3, max_repeated=2, max_polls=4)
    assert guard == {"fp": {"n": 1, "k": 3, "p": 1, "t": 1}}


# ---- whole runs --------------------------------------------------------------------------------


@pytest.mark.parametrize("max_repeated", [1, 2, 3])
def test_repeated_rejected_proposal_stops_at_limit_plus_one(max_repeated):
    # The same invalid search (unknown field), again and again; the gate rejects it identically.
    outputs = [tool(f"p{i}", "search_public", {"query": "x", "bogus": 1}) for i in range(20)]
    h = harness(outputs, max_steps=20, max_repeated_proposal=max_repeated)
    state = h.advance()
    assert state.status is Status.FAILED
    assert state.stop_reason == LOOP
    assert state.step == max_repeated + 1
    assert state.tool_calls == 0
    assert len(h.events("proposal.loop-detected")) == 1
    assert sum(h.kit.calls.values()) == 0


@pytest.mark.parametrize("max_repeated", [1, 2, 3])
def test_repeated_unparseable_output_stops_at_limit_plus_one(max_repeated):
    outputs = [{"kind": "tool", "proposal_id": "p1", "capability": "memory:write"}] * 20
    h = harness(outputs, max_steps=20, max_repeated_proposal=max_repeated)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, LOOP)
    assert state.step == max_repeated + 1


@pytest.mark.parametrize("max_repeated", [1, 2, 3])
def test_identical_tool_call_with_identical_result_stops(max_repeated):
    outputs = [tool(f"p{i}", "job_status", {"job": "j1"}) for i in range(20)]
    h = harness(outputs, max_steps=20, max_tool_calls=20, max_repeated_proposal=max_repeated)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, LOOP)
    assert state.tool_calls == max_repeated
    assert h.kit.calls["job_status"] == max_repeated
    assert state.step == max_repeated + 1


def test_changing_results_do_not_trip_the_guard():
    kit = Toolkit()
    outputs = [tool(f"p{i}", "tick", {"job": "j1"}) for i in range(20)]
    h = harness(outputs, [kit.tick_contract()], kit=kit, max_steps=6, max_tool_calls=20)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "MAX_STEPS_REACHED")
    assert state.step == 6
    assert state.tool_calls == 6
    assert kit.calls["tick"] == 6
    assert h.events("proposal.loop-detected") == []


@pytest.mark.parametrize("max_polls", [1, 3, 5])
def test_polled_tool_stops_at_its_own_maximum(max_polls):
    kit = Toolkit()
    contract = kit.tick_contract(polling=PollingPolicy(max_polls=max_polls))
    outputs = [tool(f"p{i}", "tick", {"job": "j1"}) for i in range(20)]
    h = harness(outputs, [contract], kit=kit, max_steps=20, max_tool_calls=20)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "POLLING_LIMIT_REACHED")
    assert kit.calls["tick"] == max_polls
    assert state.tool_calls == max_polls
    assert state.step == max_polls + 1


def test_new_content_in_between_resets_the_repeat_count():
    # The same search four times, each time after a new, different tick result: not a loop.
    # (With max_repeated_proposal=1 the second tick would stop the run, rightly: between its
    # first and second proposal only the identical search result arrived — nothing new.)
    kit = Toolkit()
    outputs = []
    for i in range(4):
        outputs.append(tool(f"s{i}", "search_public", {"query": "retry"}))
        outputs.append(tool(f"t{i}", "tick", {"job": "j1"}))
    outputs.append(final("Hand off after three retries.", ["tool-1"]))
    h = harness(
        outputs,
        [kit.search_contract(), kit.tick_contract()],
        kit=kit,
        max_steps=20,
        max_tool_calls=20,
        max_repeated_proposal=2,
    )
    state = h.advance()
    assert h.events("proposal.loop-detected") == []
    assert kit.calls["search_public"] == 4
    assert (state.status, state.stop_reason) == (Status.COMPLETED, "FINAL_ANSWER_VALIDATED")


def test_loop_event_names_the_fingerprint():
    outputs = [tool(f"p{i}", "job_status", {"job": "j1"}) for i in range(10)]
    h = harness(outputs, max_repeated_proposal=2)
    h.advance()
    (event,) = h.events("proposal.loop-detected")
    assert event["details"]["fingerprint"] == proposal_hash("job_status", "1", {"job": "j1"})
    assert event["details"]["code"] == LOOP


def test_run_guard_state_stays_bounded_over_a_long_run():
    outputs = [tool(f"p{i}", "nope", {"i": i}) for i in range(100)]
    h = harness(outputs, max_steps=100)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "MAX_STEPS_REACHED")
    assert state.step == 100
    assert len(state.loop_guard) == MAX_TRACKED
    assert proposal_hash("nope", "1", {"i": 99}) in state.loop_guard
    assert proposal_hash("nope", "1", {"i": 0}) not in state.loop_guard


def test_respelled_paths_are_one_repeated_proposal():
    """issue 9 items 1 and 3: a planner respelling one path (or one number) gets no fresh
    fingerprint: the guard counts the arguments the tool would receive."""
    spellings = [
        "run-output/a", "run-output/./a", "run-output//a", "./run-output/a",
        "run-output/b/../a", "run-output/./././a", "run-output/a/.", "run-output///a",
    ]  # fmt: skip
    outputs = [
        tool(f"p{i}", "write_artifact", {"path": path, "body": "same"})
        for i, path in enumerate(spellings)
    ]
    kit = Toolkit()
    h = harness(outputs, kit=kit, max_steps=20, max_tool_calls=10, max_repeated_proposal=2)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, LOOP)
    assert kit.calls["write_artifact"] == 2
    assert kit.kv == {"run-output/a": "same"}  # the tool only ever saw the normalized path
    (event,) = h.events("proposal.loop-detected")
    assert event["details"]["fingerprint"] == proposal_hash(
        "write_artifact", "1", {"path": "run-output/a", "body": "same"}
    )


def test_respelled_numbers_are_one_repeated_proposal():
    outputs = [
        tool(f"p{i}", "search_public", {"query": "retry", "limit": limit})
        for i, limit in enumerate([1, 1.0, 1, 1.0, 1])
    ]
    kit = Toolkit()
    h = harness(outputs, kit=kit, max_steps=20, max_tool_calls=10, max_repeated_proposal=2)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, LOOP)
    assert kit.calls["search_public"] == 2
