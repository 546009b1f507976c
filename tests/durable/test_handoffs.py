"""Human handoff (seed §14, SPEC §5): a reviewer claims and resolves through commands, each with
identity and reason in the run's trace; nobody sets a status by hand. Also seed experiment 3
(write succeeded, verification failed), which is where a compensation handoff comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

import runs
from agentconsole import wiring
from policy.domain.errors import DomainError
from runs import models as m
from runs import services
from runs.domain import lifecycle
from runs.domain.machine import Status
from runs.people.handoffs import HandoffError, handoff_claim, handoff_resolve
from tests.durable.durable_kit import Run, create, final, load, run_fixture, start, use, write
from tests.support.personas import make_user
from tests.support.races import THREADS, race

pytestmark = pytest.mark.django_db(transaction=True)

FAULTLAB = Path(runs.__file__).parent / "fixtures" / "faultlab"
VERIFICATION_FAILED = FAULTLAB / "verification-failed.json"


@pytest.fixture
def reviewer():
    return make_user("rita", password="pw-rita-1")


def _unknown_write(*, reconcile: str = "unknown") -> Run:
    """write_artifact wrote the file, its answer was lost and reconcile cannot tell."""
    run = create(
        [write("p1"), final("tool-1")],
        faults={"tools": {"write_artifact": {"mode": "unknown", "reconcile": reconcile}}},
    )
    state = services.run_advance(run_id=run.run_id)
    assert (state.status, state.stop_reason) == (Status.FAILED, "TOOL_OUTCOME_UNKNOWN")
    done = Run(run.run_id)
    assert [r["status"] for r in done.ledger] == ["unknown"]
    return done


def _unknown_note(plugin_tools) -> Run:
    run = create(
        [use("p1", "durable_note"), final("tool-1")],
        faults={"tools": {"durable_note": {"mode": "timeout", "reconcile": "unknown"}}},
    )
    services.run_advance(run_id=run.run_id)
    done = Run(run.run_id)
    assert [r["status"] for r in done.ledger] == ["unknown"]
    return done


def _resolved(run: Run) -> list[tuple[str, str, str]]:
    return [
        (e["details"]["action"], e["details"]["by"], e["details"]["reason"])
        for e in run.events("handoff.resolved")
    ]


def _ledger_status(run_id: str) -> str:
    return m.LedgerEntry.objects.get(run_id=run_id).status


# --- seed experiment 3 ------------------------------------------------------------------------


def test_verification_failure_fails_the_run_with_a_compensation_handoff(run_output_root):
    result = run_fixture(VERIFICATION_FAILED)
    state = result["state"]
    assert (state["status"], state["stop_reason"]) == ("failed", "TOOL_POSTCONDITION_FAILED")
    assert state["answer"] is None
    [row] = result["ledger"]
    assert row["status"] == "compensation-required"
    assert row["verification"]["ok"] is False
    assert row["verification"]["code"] == "ARTIFACT_HASH_MISMATCH"
    events = [e["event"] for e in result["trace"]]
    assert "tool.verification-failed" in events
    assert "final.validated" not in events
    # The failed write is not evidence: nothing citable came from it.
    assert not any(o["citable"] for o in result["observations"])
    run = Run(state["run_id"])
    handoff = run.open_handoff()
    assert handoff.reason == "TOOL_POSTCONDITION_FAILED"
    [effect] = handoff.bundle["unknown_effects"]
    assert (effect["status"], effect["idempotency_token"]) == (
        "compensation-required",
        row["idempotency_token"],
    )


# --- claim ------------------------------------------------------------------------------------


def test_claim_records_the_assignee_and_a_second_claim_is_refused(reviewer, run_output_root):
    run = _unknown_write()
    handoff = run.open_handoff()
    version = load(run.run_id).version

    claimed = handoff_claim(handoff_id=handoff.pk, by=reviewer)

    assert claimed.status == "claimed"
    assert claimed.assignee_id == reviewer.pk
    assert claimed.claimed_at is not None
    after = Run(run.run_id)
    assert [e["details"]["by"] for e in after.events("handoff.claimed")] == ["rita"]
    assert after.events("handoff.claimed")[0]["details"]["handoff"] == handoff.pk
    assert load(run.run_id).version == version + 1  # a trace event, through the store
    assert load(run.run_id).status is Status.FAILED

    other = make_user("sam", password="pw-sam-1")
    with pytest.raises(HandoffError) as caught:
        handoff_claim(handoff_id=handoff.pk, by=other)
    assert caught.value.code == "HANDOFF_NOT_OPEN"
    handoff.refresh_from_db()
    assert handoff.assignee_id == reviewer.pk
    assert len(Run(run.run_id).events("handoff.claimed")) == 1


# --- resolve: refusals ------------------------------------------------------------------------


def test_resolve_needs_a_claim_a_reason_and_a_known_action(reviewer, run_output_root):
    run = _unknown_write()
    handoff = run.open_handoff()
    trace_before = Run(run.run_id).trace

    with pytest.raises(HandoffError) as not_claimed:
        handoff_resolve(
            handoff_id=handoff.pk, by=reviewer, action="mark_effect_present", reason="checked"
        )
    assert not_claimed.value.code == "HANDOFF_NOT_CLAIMED"

    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    for reason in ("", "   "):
        with pytest.raises(HandoffError) as no_reason:
            handoff_resolve(
                handoff_id=handoff.pk, by=reviewer, action="mark_effect_present", reason=reason
            )
        assert no_reason.value.code == "HANDOFF_REASON_REQUIRED"
    for action in ("set_status_completed", "", "MARK_EFFECT_PRESENT"):
        with pytest.raises(HandoffError) as unknown:
            handoff_resolve(handoff_id=handoff.pk, by=reviewer, action=action, reason="because")
        assert unknown.value.code == "HANDOFF_ACTION_UNKNOWN"

    # None of the refusals changed anything beyond the claim.
    handoff.refresh_from_db()
    assert handoff.status == "claimed"
    assert _ledger_status(run.run_id) == "unknown"
    after = Run(run.run_id)
    assert after.events("handoff.resolved") == []
    assert [e["event"] for e in after.trace[len(trace_before) :]] == ["handoff.claimed"]


# --- resolve: effect actions ------------------------------------------------------------------


def test_mark_effect_present_reconciles_the_row(reviewer, plugin_tools):
    run = _unknown_note(plugin_tools)
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    resolved = handoff_resolve(
        handoff_id=handoff.pk,
        by=reviewer,
        action="mark_effect_present",
        reason="the note is in the outside system",
    )
    assert resolved.status == "resolved"
    assert resolved.resolution["action"] == "mark_effect_present"
    row = m.LedgerEntry.objects.get(run_id=run.run_id)
    assert row.status == "reconciled"
    assert row.verification["by"] == "rita"
    assert row.verification["reason"] == "the note is in the outside system"
    after = Run(run.run_id)
    assert _resolved(after) == [
        ("mark_effect_present", "rita", "the note is in the outside system")
    ]
    assert after.events("handoff.resolved")[0]["details"]["ledger_status"] == "reconciled"
    assert plugin_tools.calls("durable_note") == []  # marking is not executing
    assert (after.status, after.stop_reason) == ("failed", "TOOL_OUTCOME_UNKNOWN")


def test_mark_effect_absent_fails_the_row(reviewer, plugin_tools):
    run = _unknown_note(plugin_tools)
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by="reviewer-bob")
    handoff_resolve(
        handoff_id=handoff.pk,
        by="reviewer-bob",
        action="mark_effect_absent",
        reason="not in the outside system",
    )
    assert _ledger_status(run.run_id) == "failed"
    after = Run(run.run_id)
    assert _resolved(after) == [("mark_effect_absent", "reviewer-bob", "not in the outside system")]
    assert (after.status, after.stop_reason) == ("failed", "TOOL_OUTCOME_UNKNOWN")


def test_retry_with_the_same_token_finds_the_effect_and_writes_nothing_twice(
    reviewer, run_output_root
):
    run = _unknown_write()
    token = run.ledger[0]["idempotency_token"]
    assert m.Artifact.objects.filter(run_id=run.run_id).count() == 1  # the lost answer's effect
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)

    resolved = handoff_resolve(
        handoff_id=handoff.pk, by=reviewer, action="retry_same_token", reason="safe to repeat"
    )

    assert resolved.resolution["idempotency_token"] == token
    assert resolved.resolution["retried"] is True
    row = m.LedgerEntry.objects.get(run_id=run.run_id)
    assert (row.idempotency_token, row.status) == (token, "reconciled")
    artifacts = list(m.Artifact.objects.filter(run_id=run.run_id))
    assert [a.idempotency_token for a in artifacts] == [token]
    assert (run_output_root / run.run_id / "summary.md").read_text() == (
        "Three retries, then quarantine."
    )
    after = Run(run.run_id)
    assert _resolved(after) == [("retry_same_token", "rita", "safe to repeat")]
    assert after.events("tool.started") == run.events("tool.started")  # no new command
    assert after.status == "failed"


def test_compensate_removes_the_unverified_write(reviewer, run_output_root):
    result = run_fixture(VERIFICATION_FAILED)
    run = Run(result["state"]["run_id"])
    path = run_output_root / run.run_id / "summary.md"
    assert path.exists()
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)

    handoff_resolve(
        handoff_id=handoff.pk, by=reviewer, action="compensate", reason="hash mismatch, undo"
    )

    assert not path.exists()
    assert _ledger_status(run.run_id) == "reconciled"
    after = Run(run.run_id)
    assert _resolved(after) == [("compensate", "rita", "hash mismatch, undo")]
    assert after.events("handoff.resolved")[0]["details"]["ledger_status"] == "reconciled"
    assert (after.status, after.stop_reason) == ("failed", "TOOL_POSTCONDITION_FAILED")


def test_compensate_is_refused_for_a_tool_that_cannot_compensate(reviewer, plugin_tools):
    run = _unknown_note(plugin_tools)  # durable_note declares no compensate()
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    with pytest.raises(HandoffError) as caught:
        handoff_resolve(handoff_id=handoff.pk, by=reviewer, action="compensate", reason="undo")
    assert caught.value.code == "COMPENSATION_NOT_SUPPORTED"
    handoff.refresh_from_db()
    assert handoff.status == "claimed"
    assert _ledger_status(run.run_id) == "unknown"


def test_resolving_twice_is_a_conflict_and_changes_nothing(reviewer, plugin_tools):
    run = _unknown_note(plugin_tools)
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    handoff_resolve(
        handoff_id=handoff.pk, by=reviewer, action="mark_effect_present", reason="checked"
    )
    before = Run(run.run_id)
    with pytest.raises(HandoffError) as caught:
        handoff_resolve(
            handoff_id=handoff.pk, by=reviewer, action="mark_effect_absent", reason="changed mind"
        )
    assert caught.value.http_status == 409
    assert caught.value.code in ("HANDOFF_NOT_CLAIMED", "HANDOFF_CONFLICT")
    assert _ledger_status(run.run_id) == "reconciled"
    assert Run(run.run_id).trace == before.trace
    handoff.refresh_from_db()
    assert handoff.resolution["action"] == "mark_effect_present"


# --- resolve: run commands --------------------------------------------------------------------


@pytest.mark.parametrize("action", ["cancel", "fail"])
def test_cancel_or_fail_on_a_finished_run_leaves_its_status(reviewer, plugin_tools, action):
    run = _unknown_note(plugin_tools)
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    handoff_resolve(handoff_id=handoff.pk, by=reviewer, action=action, reason="closing it")
    after = Run(run.run_id)
    assert (after.status, after.stop_reason) == ("failed", "TOOL_OUTCOME_UNKNOWN")
    assert _resolved(after) == [(action, "rita", "closing it")]
    assert _ledger_status(run.run_id) == "unknown"  # a run command does not settle an effect
    assert after.events("state.transitioned") == run.events("state.transitioned")


def _running_with_handoff() -> Run:
    """A running run with an open handoff, committed through the store (no status set by
    hand): the commit of a running state that asks for a handoff."""
    run = create([use("p1", "durable_steady"), final("tool-1")])
    store = wiring.store()
    running = start(run.run_id)
    commit = lifecycle.handoff_event(running, "handoff.opened", reason="POLICY_UNCLASSIFIED")
    commit.handoff_reason = "POLICY_UNCLASSIFIED"
    store.apply(commit)
    return Run(run.run_id)


@pytest.mark.parametrize(
    ("action", "status", "stop_reason"),
    [("cancel", "cancelled", "CANCELLED"), ("fail", "failed", "FAILED_BY_REVIEWER")],
)
def test_cancel_or_fail_on_a_live_run_goes_through_the_state_machine(
    reviewer, plugin_tools, action, status, stop_reason
):
    run = _running_with_handoff()
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    handoff_resolve(handoff_id=handoff.pk, by=reviewer, action=action, reason="not worth it")
    after = Run(run.run_id)
    after.check()
    assert (after.status, after.stop_reason) == (status, stop_reason)
    assert after.events("state.transitioned")[-1]["details"]["to"] == status
    assert after.events("run.stopped")[-1]["details"]["by"] == "rita"
    assert _resolved(after) == [(action, "rita", "not worth it")]
    # Terminal now: nothing is planned or executed afterwards.
    services.run_advance(run_id=run.run_id)
    assert Run(run.run_id).ledger == []
    assert plugin_tools.calls("durable_steady") == []


def test_an_effect_action_without_an_effect_is_refused(reviewer, plugin_tools):
    run = _running_with_handoff()
    handoff = run.open_handoff()
    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    with pytest.raises(DomainError) as caught:
        handoff_resolve(
            handoff_id=handoff.pk, by=reviewer, action="mark_effect_present", reason="x"
        )
    assert caught.value.code == "HANDOFF_NO_EFFECT"
    assert load(run.run_id).status is Status.RUNNING


@pytest.mark.postgres
def test_twenty_reviewers_claiming_at_once_exactly_one_wins(postgres_only, plugin_tools):
    run = _unknown_note(plugin_tools)
    handoff = run.open_handoff()
    n = THREADS
    results = race(lambda i: handoff_claim(handoff_id=handoff.pk, by=f"reviewer-{i}"))
    winners = [r for r in results if isinstance(r, m.Handoff)]
    losers = [r for r in results if isinstance(r, HandoffError)]
    assert len(winners) == 1, results
    assert len(losers) == n - 1, results
    assert {e.code for e in losers} == {"HANDOFF_NOT_OPEN"}
    claimed = Run(run.run_id).events("handoff.claimed")
    assert len(claimed) == 1
