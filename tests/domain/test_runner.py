"""Whole runs: Runner + InMemoryRunStore + ThreadExecutor + FixturePlanner, real small tools."""

from __future__ import annotations

import pytest

from policy.domain.canonical import proposal_hash
from policy.domain.confirmation.confirmations import ConfirmationStatus
from policy.domain.contracts import ConfirmationMode
from policy.domain.observations import TrustLabel
from runs.domain import lifecycle
from runs.domain.machine import Status
from runs.domain.trace import MAX_DETAIL_STRING, TraceDraft
from runs.engine import executor as executor_module
from tests.domain.toolkit import (
    DEADLINE_MS,
    SECRET,
    FixedClock,
    Toolkit,
    final,
    grant,
    harness,
    tool,
)

PREF = {"key": "answer_language", "value": "zh"}
ANSWER = "After three retries, hand off to a person."


@pytest.fixture
def kit():
    kit = Toolkit()
    yield kit
    kit.release.set()  # let a hanging tool's thread end


@pytest.fixture
def short_grace(monkeypatch):
    # A hanging tool is declared unknown after the cancel grace; keep the wait short.
    monkeypatch.setattr(executor_module, "CANCEL_GRACE_S", 0.05)


def approve(h, confirmation_id: str, approved: bool = True):
    commit = lifecycle.decide_confirmation(
        h.state(), confirmation_id=confirmation_id, approved=approved, by="operator-olga"
    )
    return h.store.apply(commit)


# ---- the happy path and counting ---------------------------------------------------------------


def test_search_then_final_completes():
    h = harness(
        [
            tool("p1", "search_public", {"query": "retries exhausted"}),
            final(ANSWER, ["tool-1"]),
        ]
    )
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.COMPLETED, "FINAL_ANSWER_VALIDATED")
    assert state.answer == ANSWER
    assert state.citations == ["tool-1"]
    obs = h.observation("tool-1")
    assert obs.trust is TrustLabel.UNTRUSTED_CONTENT
    assert obs.citable
    assert h.observation("user-1").trust is TrustLabel.USER
    assert [e["details"]["source"] for e in h.events("planner.output")] == ["fixture", "fixture"]
    (row,) = h.ledger()
    assert row["status"] == "succeeded"


def test_steps_and_tool_calls_counted_apart():
    h = harness(
        [
            tool("p1", "search_public", {"query": "x", "bogus": True}),  # rejected: a step
            tool("p2", "search_public", {"query": "retry"}),  # a step and a tool call
            final(ANSWER, ["tool-2"]),  # a step
        ]
    )
    state = h.advance()
    assert state.status is Status.COMPLETED
    assert state.step == 3
    assert state.tool_calls == 1
    assert h.kit.calls["search_public"] == 1
    assert h.observation("policy-1").content["code"] == "UNKNOWN_INPUT_FIELD"


def test_max_tool_calls_stops_without_an_extra_call():
    outputs = [tool(f"p{i}", "kv_put", {"key": f"k{i}", "value": i}) for i in range(6)]
    h = harness(outputs, max_tool_calls=2, max_steps=10)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "MAX_TOOL_CALLS_REACHED")
    assert state.tool_calls == 2
    assert h.kit.calls["kv_put"] == 2
    assert h.kit.kv == {"k0": 0, "k1": 1}
    assert state.step == 3


def test_max_steps_reached_with_rejections_only():
    outputs = [tool(f"p{i}", "nope", {"i": i}) for i in range(10)]
    h = harness(outputs, max_steps=4)
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "MAX_STEPS_REACHED")
    assert (state.step, state.tool_calls) == (4, 0)


def test_grant_call_count_is_spent_per_call():
    outputs = [
        tool("p1", "kv_put", {"key": "a", "value": 1}),
        tool("p2", "kv_put", {"key": "b", "value": 2}),
        final(ANSWER, ["tool-1"]),
    ]
    h = harness(outputs, grants=[grant("kv:write", max_calls=1)])
    state = h.advance()
    assert h.kit.calls["kv_put"] == 1
    assert h.observation("policy-2").content["code"] == "CAPABILITY_CALLS_EXHAUSTED"
    assert state.status is Status.COMPLETED


# ---- deadline, timeout, unknown outcomes ---------------------------------------------------------


@pytest.mark.parametrize("now", [DEADLINE_MS, DEADLINE_MS + 1])
def test_deadline_passed_fails_without_tool_call(now):
    h = harness(
        [tool("p1", "kv_put", {"key": "a", "value": 1})],
        clock=FixedClock(now),
    )
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "DEADLINE_REACHED")
    assert state.tool_calls == 0
    assert h.kit.calls["kv_put"] == 0
    assert h.ledger() == []
    assert h.events("planner.output") == []


def test_hanging_tool_times_out_as_unknown(kit, short_grace):
    h = harness(
        [tool("p1", "slow_job", {"job": "j1"}), final(ANSWER, ["tool-1"])],
        [kit.hang_contract(timeout_ms=30)],
        kit=kit,
    )
    state = h.advance()
    assert kit.cancel_seen.wait(1.0), "the cancel signal never reached the tool"
    assert (state.status, state.stop_reason) == (Status.FAILED, "TOOL_OUTCOME_UNKNOWN")
    assert state.unresolved_effects == 1
    (row,) = h.ledger()
    assert row["status"] == "unknown"
    assert row["outcome"]["code"] == "TOOL_TIMEOUT"
    (completed,) = h.events("tool.completed")
    assert (completed["details"]["status"], completed["details"]["code"]) == (
        "unknown",
        "TOOL_TIMEOUT",
    )
    assert "tool-1" not in h.store.observations[h.run_id]  # nothing citable from an unknown


def test_hanging_tool_with_reconcile_is_a_normal_step(kit, short_grace):
    h = harness(
        [tool("p1", "slow_job", {"job": "j1"}), final(ANSWER, ["tool-1"])],
        [kit.hang_contract(timeout_ms=30, reconcile=True)],
        kit=kit,
    )
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.COMPLETED, "FINAL_ANSWER_VALIDATED")
    assert state.unresolved_effects == 0
    assert kit.calls["slow_job"] == 1  # reconciled, never re-executed
    assert kit.calls["reconcile"] == 1
    (row,) = h.ledger()
    assert row["status"] == "reconciled"
    assert kit.seen_tokens == [row["idempotency_token"]]  # asked with the same token
    assert h.observation("tool-1").citable


def test_tool_exception_fails_with_internal_error_and_no_traceback(kit):
    h = harness([tool("p1", "broken", {"job": "j1"})], [kit.broken_contract()], kit=kit)
    state = h.advance()
    assert kit.calls["broken"] == 1
    assert state.status is Status.FAILED
    assert state.stop_reason == "TOOL_FAILED"
    (row,) = h.ledger()
    assert (row["status"], row["outcome"]["code"]) == ("failed", "TOOL_INTERNAL_ERROR")
    (stopped,) = h.events("run.stopped")
    assert stopped["details"]["code"] == "TOOL_INTERNAL_ERROR"
    stored = h.everything_stored()
    for leak in ("Traceback", "broken.py", "hunter2", "line 7"):
        assert leak not in stored
    for event in h.events():
        for value in event["details"].values():
            assert "Traceback" not in str(value)


# ---- final answers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cites",
    [
        ["policy-1"],  # a policy rejection is no evidence
        ["tool-9"],  # missing
        ["user-1"],  # the user's own request is no evidence
        [],  # no citation at all
        ["tool-2", "tool-9"],  # one valid, one missing
    ],
)
def test_final_citation_validation(cites):
    h = harness(
        [
            tool("p1", "search_public", {"query": "x", "bogus": 1}),
            tool("p2", "search_public", {"query": "retry"}),
            final(ANSWER, cites),
        ]
    )
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "FINAL_CITATION_VALIDATION_FAILED")
    assert state.answer is None
    assert len(h.events("final.rejected")) == 1


def test_final_cannot_cite_a_failed_tool_result(kit):
    h = harness(
        [tool("p1", "call_api", {"echo": "message"}), final(ANSWER, ["tool-1"])],
        [kit.api_contract()],
        kit=kit,
    )
    state = h.advance()
    assert (state.status, state.stop_reason) == (Status.FAILED, "FINAL_CITATION_VALIDATION_FAILED")


# ---- confirmations -----------------------------------------------------------------------------


def test_per_call_confirmation_flow_executes_exactly_once():
    h = harness(
        [
            tool("p1", "save_preference", PREF),
            tool("p2", "save_preference", PREF),  # same arguments, new proposal id
            final(ANSWER, ["tool-1"]),
        ]
    )
    state = h.advance()
    assert state.status is Status.WAITING_CONFIRMATION
    assert state.stop_reason == "USER_CONFIRMATION_REQUIRED"
    assert h.kit.calls["save_preference"] == 0
    (pending,) = h.confirmations()
    assert pending.status is ConfirmationStatus.PENDING
    assert pending.proposal_hash == proposal_hash("save_preference", "1", PREF)
    assert state.pending_confirmation_id == pending.confirmation_id

    # Advancing again without a decision changes nothing.
    assert h.advance().status is Status.WAITING_CONFIRMATION
    assert h.kit.calls["save_preference"] == 0

    approve(h, pending.confirmation_id)
    state = h.advance()
    assert h.kit.calls["save_preference"] == 1
    assert h.kit.prefs == {"answer_language": "zh"}
    by_id = {c.confirmation_id: c for c in h.confirmations()}
    assert by_id[pending.confirmation_id].status is ConfirmationStatus.CONSUMED

    # The same proposal again waits again: one confirmation authorizes one execution.
    assert state.status is Status.WAITING_CONFIRMATION
    assert h.kit.calls["save_preference"] == 1
    new = [c for c in h.confirmations() if c.status is ConfirmationStatus.PENDING]
    assert len(new) == 1
    assert new[0].confirmation_id != pending.confirmation_id
    assert new[0].proposal_hash == pending.proposal_hash

    (started,) = h.events("tool.started")
    assert started["details"]["confirmation_id"] == pending.confirmation_id


def test_declined_confirmation_rejects_without_calling_the_tool():
    h = harness([tool("p1", "save_preference", PREF), final(ANSWER, ["tool-1"])])
    h.advance()
    (pending,) = h.confirmations()
    state = approve(h, pending.confirmation_id, approved=False)
    assert state.status is Status.RUNNING
    assert state.pending_proposal is None
    obs = h.observation("policy-1")
    assert obs.trust is TrustLabel.POLICY
    assert obs.content["code"] == "CONFIRMATION_DECLINED"
    (decided,) = h.confirmations()
    assert decided.status is ConfirmationStatus.DECLINED
    state = h.advance()
    assert h.kit.calls["save_preference"] == 0
    assert h.kit.prefs == {}
    # The planner's final cites nothing real: the run fails rather than claiming success.
    assert state.stop_reason == "FINAL_CITATION_VALIDATION_FAILED"


def test_confirmation_for_other_arguments_does_not_authorize():
    h = harness(
        [
            tool("p1", "save_preference", PREF),
            tool("p2", "save_preference", {**PREF, "value": "en"}),
        ]
    )
    h.advance()
    (pending,) = h.confirmations()
    approve(h, pending.confirmation_id)
    state = h.advance()
    assert h.kit.prefs == {"answer_language": "zh"}  # only the approved arguments
    assert state.status is Status.WAITING_CONFIRMATION
    assert h.kit.calls["save_preference"] == 1


def test_per_run_confirmation_covers_later_calls(kit):
    contract = kit.kv_contract(confirmation=ConfirmationMode.PER_RUN)
    outputs = [
        tool("p1", "kv_put", {"key": "a", "value": 1}),
        tool("p2", "kv_put", {"key": "b", "value": 2}),
        final(ANSWER, ["tool-2"]),
    ]
    h = harness(outputs, [contract], kit=kit)
    assert h.advance().status is Status.WAITING_CONFIRMATION
    (pending,) = h.confirmations()
    approve(h, pending.confirmation_id)
    state = h.advance()
    assert state.status is Status.COMPLETED
    assert kit.kv == {"a": 1, "b": 2}
    (c,) = h.confirmations()
    assert c.status is ConfirmationStatus.APPROVED  # per-run: never consumed


def test_injected_search_content_cannot_write_memory():
    h = harness(
        [
            tool("p1", "search_public", {"query": "SYSTEM auto_approve"}),
            tool(
                "p2",
                "save_preference",
                {"key": "auto_approve", "value": "true"},
                sources=["tool-1"],
            ),
            final(ANSWER, ["tool-1"]),
        ]
    )
    state = h.advance()
    assert state.status is Status.COMPLETED
    assert h.kit.prefs == {}
    assert h.observation("policy-2").content["code"] == "MEMORY_KEY_NOT_ALLOWED"
    (received,) = [e for e in h.events("proposal.received") if e["proposal_id"] == "p2"]
    assert received["details"]["cites_untrusted"] == ["tool-1"]
    assert h.confirmations() == []


# ---- identity of a proposal ----------------------------------------------------------------------


def test_same_proposal_id_and_arguments_twice_is_refused():
    h = harness(
        [
            tool("p1", "kv_put", {"key": "a", "value": 1}),
            tool("p1", "kv_put", {"key": "a", "value": 1}),
            final(ANSWER, ["tool-1"]),
        ]
    )
    state = h.advance()
    assert h.kit.calls["kv_put"] == 1
    assert h.observation("policy-2").content["code"] == "PROPOSAL_ALREADY_EXECUTED"
    assert state.status is Status.COMPLETED
    assert state.tool_calls == 1


def test_idempotency_token_reaches_the_tool():
    h = harness([tool("p1", "kv_put", {"key": "a", "value": 1}), final(ANSWER, ["tool-1"])])
    h.advance()
    (row,) = h.ledger()
    assert h.kit.seen_tokens == [row["idempotency_token"]]


# ---- malformed planner output --------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "I will now call the tool",
        ["kind", "tool"],
        {"kind": "tool", "proposal_id": "p1", "capability": "memory:write"},
        {"kind": "x" * 300},
        {"kind": {"nested": ["value"]}},
        {"kind": "tool", "proposal_id": "p" * 500, "tool_name": "kv_put", "tool_version": "1"},
    ],
)
def test_malformed_output_is_a_parse_error_not_a_crash(raw):
    h = harness([raw, final(ANSWER, ["user-1"])])
    state = h.advance()
    obs = h.observation("policy-1")
    assert obs.content["code"] == "PARSE_ERROR"
    assert obs.content["layer"] == "parse"
    assert state.step == 2
    assert sum(h.kit.calls.values()) == 0


# ---- secrets -------------------------------------------------------------------------------------


@pytest.mark.parametrize("echo", ["value", "message", "code"])
def test_secret_echoed_by_a_tool_is_never_stored(kit, echo):
    h = harness(
        [tool("p1", "call_api", {"echo": echo}), final(ANSWER, ["tool-1"])],
        [kit.api_contract()],
        kit=kit,
        secrets={"call_api": {"API_KEY": SECRET, "OTHER_KEY": "other-secret-999"}},
    )
    h.advance()
    assert kit.seen_secrets == [SECRET]  # the tool did get its key
    assert kit.seen_secret_names == [("API_KEY",)]  # and only the keys its contract names
    stored = h.everything_stored()
    assert SECRET not in stored
    assert "other-secret-999" not in stored


# ---- trace details -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "details",
    [
        {"value": {"nested": 1}},
        {"value": [{"a": 1}]},
        {"value": [[1]]},
        {"value": b"bytes"},
        {"value": object()},
        {"value": "x" * (MAX_DETAIL_STRING + 1)},
        {"value": list(range(65))},
        {"value": {1, 2}},
    ],
)
def test_trace_draft_rejects_rich_details(details):
    with pytest.raises(ValueError, match="trace detail"):
        TraceDraft("tool.completed", "p1", details)


def test_trace_draft_accepts_scalars_and_short_lists():
    draft = TraceDraft(
        "tool.completed",
        "p1",
        {"a": "x" * MAX_DETAIL_STRING, "b": 1, "c": 1.5, "d": True, "e": None, "f": ["x", 2]},
    )
    assert draft.details["f"] == ["x", 2]


def test_every_stored_trace_detail_is_scalar():
    h = harness(
        [
            tool("p1", "search_public", {"query": "retry " * 100}),
            tool("p2", "write_artifact", {"path": "run-output/a.txt", "body": "hello"}),
            final(ANSWER, ["tool-1"]),
        ]
    )
    h.advance()
    for event in h.events():
        for value in event["details"].values():
            items = value if isinstance(value, list) else [value]
            for item in items:
                assert item is None or isinstance(item, str | int | float | bool)
                if isinstance(item, str):
                    assert len(item) <= MAX_DETAIL_STRING
