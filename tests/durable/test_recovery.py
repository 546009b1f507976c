"""Crash recovery (SPEC §4): a worker that dies mid-tool leaves a ``started`` ledger row. The
next worker settles that row first, with its own token — reconcile, re-execute when the effect
is known absent or the call is replayable, else a handoff — and never re-plans the step.

The dead worker is simulated by its exact leftovers, in two ways: the intent commit of the real
step functions (``steps.decide``) applied through the store and no outcome; or a real worker
(lease, runner, executor) whose executor stops dead at one tool, before or after its effect.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from agentconsole import wiring
from policy.domain.contracts import CancelSignal, ToolContext
from runs import models as m
from runs import services
from runs.domain.machine import Status
from runs.engine.sweeper import sweep
from runs.fault_lab import faults
from runs.tools import artifacts
from tests.durable.durable_kit import (
    CONTENT,
    Run,
    advance_until_worker_dies,
    create,
    final,
    load,
    plan_and_record_intent,
    search,
    use,
    write,
)
from tests.support.clock import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)


def _write_effect_as_the_dead_worker_did(command, run_output_root) -> None:
    """The tool ran to its end (file and Artifact row) before the worker died."""
    state = load(command.run_id)
    ctx = ToolContext(
        run_id=command.run_id,
        subject=state.subject,
        step=state.step,
        idempotency_token=command.idempotency_token,
        deadline_ms=command.deadline_ms,
        cancel=CancelSignal(),
        services={"run_output_root": str(run_output_root)},
    )
    outcome = artifacts.execute(dict(command.validated_arguments), ctx)
    assert outcome.status.value == "succeeded"


def _planner_outputs(run: Run) -> list[str | None]:
    return [e["proposal_id"] for e in run.events("planner.output")]


def _recovered(run_id: str, command, ledger_status: str) -> Run:
    """Advance the crashed run: it completes, its one ledger row settled under the same token."""
    state = services.run_advance(run_id=run_id)

    assert state.status is Status.COMPLETED
    done = Run(run_id)
    done.check()
    assert [(r["idempotency_token"], r["status"], r["attempt"]) for r in done.ledger] == [
        (command.idempotency_token, ledger_status, 1)
    ]
    return done


def test_effect_already_present_is_reconciled_and_the_run_continues(run_output_root):
    run = create([write("p1"), final("tool-1", answer="Written.")])
    command = plan_and_record_intent(run.run_id)
    _write_effect_as_the_dead_worker_did(command, run_output_root)
    crashed = Run(run.run_id)
    assert [r["status"] for r in crashed.ledger] == ["started"]
    assert _planner_outputs(crashed) == ["p1"]

    done = _recovered(run.run_id, command, "reconciled")
    recovered = done.events("tool.recovered")
    assert [(e["details"]["how"], e["details"]["idempotency_token"]) for e in recovered] == [
        ("reconciled", command.idempotency_token)
    ]
    # Settled before anything else happened, and the planner was not asked for p1 again.
    names = done.names()
    assert names.index("tool.recovered") < names.index("tool.completed")
    assert _planner_outputs(done) == ["p1", None]
    assert len(done.events("tool.started")) == 1
    assert m.Artifact.objects.filter(run_id=run.run_id).count() == 1
    tool_1 = done.observation("tool-1")
    assert tool_1["citable"] is True
    assert tool_1["content"]["value"]["sha256"] == hashlib.sha256(CONTENT.encode()).hexdigest()
    assert done.state["answer"] == "Written."


def test_effect_absent_is_executed_once_under_the_same_token(run_output_root):
    run = create([write("p1"), final("tool-1")])
    command = plan_and_record_intent(run.run_id)
    assert not (run_output_root / run.run_id).exists()

    done = _recovered(run.run_id, command, "succeeded")
    assert [e["details"]["how"] for e in done.events("tool.recovered")] == ["re-executed"]
    artifact = m.Artifact.objects.get(run_id=run.run_id)
    assert artifact.idempotency_token == command.idempotency_token
    assert (run_output_root / run.run_id / "summary.md").read_text() == CONTENT
    assert _planner_outputs(done) == ["p1", None]


def test_a_write_that_cannot_be_asked_after_a_crash_hands_off(corpus, plugin_tools):
    """durable_note: a compensatable write without reconcile. The worker died during it; nobody
    can tell whether it took effect. Nothing runs again: failed + handoff with the evidence."""
    run = create([search("p1"), use("p2", "durable_note"), use("p3", "durable_note", text="y")])
    advance_until_worker_dies(run.run_id, tool="durable_note")
    crashed = Run(run.run_id)
    assert [(r["tool_name"], r["status"]) for r in crashed.ledger] == [
        ("search_public", "succeeded"),
        ("durable_note", "started"),
    ]
    token = crashed.ledger[1]["idempotency_token"]
    assert crashed.observation("tool-1")["trust"] == "untrusted-content"

    report = sweep(enqueue=False)  # the sweeper finds the stranded run and advances it here

    assert report.requeued == [run.run_id]
    done = Run(run.run_id)
    done.check()
    assert (done.status, done.stop_reason) == ("failed", "TOOL_OUTCOME_UNKNOWN")
    assert [(r["tool_name"], r["status"]) for r in done.ledger] == [
        ("search_public", "succeeded"),
        ("durable_note", "unknown"),
    ]
    assert [e["details"]["how"] for e in done.events("tool.recovered")] == ["unknown"]
    assert plugin_tools.calls("durable_note") == []  # never called again, under any token
    assert _planner_outputs(done) == ["p1", "p2"]  # p3 never planned
    assert len(done.events("tool.started")) == 2
    assert load(run.run_id).unresolved_effects == 1

    handoff = done.open_handoff()
    assert handoff.reason == "TOOL_OUTCOME_UNKNOWN"
    assert [e["details"]["reason"] for e in done.events("handoff.opened")] == [
        "TOOL_OUTCOME_UNKNOWN"
    ]
    bundle = handoff.bundle
    assert bundle["run_id"] == run.run_id
    assert bundle["status"] == "failed"
    assert bundle["version"] == done.state["version"]
    assert bundle["goal"] == run.goal
    observations = bundle["last_trusted_observations"]
    assert observations, "no trusted evidence in the bundle"
    assert "user-1" in [o["observation_id"] for o in observations]
    assert all(o["trust"] != "untrusted-content" for o in observations)
    assert "tool-1" not in [o["observation_id"] for o in observations]  # the search result
    assert "pending_proposal" in bundle
    effects = bundle["unknown_effects"]
    assert [(e["idempotency_token"], e["tool"], e["status"]) for e in effects] == [
        (token, "durable_note", "unknown")
    ]
    assert bundle["recommended_safe_actions"]
    assert any("same idempotency token" in a for a in bundle["recommended_safe_actions"])
    assert "retry under a new idempotency token" in bundle["forbidden_automatic_actions"]
    assert "re-plan from step one" in bundle["forbidden_automatic_actions"]
    # The bundle is evidence, not a dump: the untrusted search text is nowhere in it.
    results = done.observation("tool-1")["content"]["value"]["results"]
    assert results, "the search found nothing: the test proves nothing about untrusted text"
    assert all(r["passage"] not in json.dumps(bundle) for r in results)


def test_the_sweeper_leaves_a_run_alone_while_its_worker_is_alive(plugin_tools):
    run = create([write("p1"), final("tool-1")])
    plan_and_record_intent(run.run_id)
    from runs.engine.leases import lease_acquire

    assert lease_acquire(run_id=run.run_id, owner="live-worker")
    report = sweep(enqueue=False)
    assert report.requeued == []
    assert [r["status"] for r in Run(run.run_id).ledger] == ["started"]


def test_a_crash_after_the_effect_is_reconciled_not_repeated(run_output_root):
    run = create([write("p1"), final("tool-1")])
    advance_until_worker_dies(run.run_id, tool="write_artifact", after_effect=True)
    assert m.Artifact.objects.filter(run_id=run.run_id).count() == 1
    state = services.run_advance(run_id=run.run_id)
    assert state.status is Status.COMPLETED
    done = Run(run.run_id)
    assert [r["status"] for r in done.ledger] == ["reconciled"]
    assert [e["details"]["how"] for e in done.events("tool.recovered")] == ["reconciled"]
    assert m.Artifact.objects.filter(run_id=run.run_id).count() == 1


def test_a_cancel_while_the_worker_is_dead_checks_the_effect_and_starts_nothing(
    run_output_root,
):
    """The worker died before writing; then someone cancelled (a tool is active, so the run is
    ``cancelling``). The next worker must settle the row without starting the tool anew: once
    a run is cancelling no new tool starts (seed §7, §13)."""
    run = create([write("p1"), write("p2", path="run-output/second.md")])
    advance_until_worker_dies(run.run_id, tool="write_artifact")
    state = services.run_cancel(run_id=run.run_id, by="ops", reason="stop it")
    assert state.status is Status.CANCELLING

    sweep(enqueue=False)

    done = Run(run.run_id)
    done.check()
    assert (done.status, done.stop_reason) == ("cancelled", "CANCELLED")
    assert [r["proposal_id"] for r in done.ledger] == ["p1"]
    assert done.ledger[0]["status"] != "succeeded", done.ledger[0]
    assert m.Artifact.objects.filter(run_id=run.run_id).count() == 0
    assert not (run_output_root / run.run_id).exists(), "the write ran after the cancel"


def test_a_cancel_while_the_worker_is_dead_after_the_effect_records_it(run_output_root):
    """Already written: the cancel cannot undo it; it is verified, recorded, then cancelled."""
    run = create([write("p1"), write("p2", path="run-output/second.md")])
    advance_until_worker_dies(run.run_id, tool="write_artifact", after_effect=True)
    services.run_cancel(run_id=run.run_id, by="ops", reason="stop it")

    sweep(enqueue=False)

    done = Run(run.run_id)
    done.check()
    assert (done.status, done.stop_reason) == ("cancelled", "CANCELLED")
    assert [(r["proposal_id"], r["status"]) for r in done.ledger] == [("p1", "reconciled")]
    assert m.Artifact.objects.filter(run_id=run.run_id).count() == 1
    assert not (run_output_root / run.run_id / "second.md").exists()


def test_a_dead_worker_found_after_the_deadline_does_not_run_the_tool_again(run_output_root):
    clock = FakeClock()
    run = create([write("p1"), final("tool-1")], deadline_ms=60_000, created_ms=clock.now_ms())
    advance_until_worker_dies(run.run_id, tool="write_artifact")
    clock.set(load(run.run_id).deadline_ms)  # the deadline passes while the worker is dead

    sweep(enqueue=False, clock=clock)

    done = Run(run.run_id)
    done.check()
    assert (done.status, done.stop_reason) == ("cancelled", "DEADLINE_REACHED")
    assert [r["status"] for r in done.ledger] == ["failed"]
    assert done.ledger[0]["outcome"]["code"] == "TOOL_DEADLINE_EXCEEDED"
    assert m.Artifact.objects.filter(run_id=run.run_id).count() == 0
    assert not (run_output_root / run.run_id).exists()


def test_a_recovered_call_is_wrapped_by_the_fault_plan_once(settings, monkeypatch, run_output_root):
    """A recovery re-executes the call under the run's fault plan once: wrapped twice, every
    injected delay would double and every injected fault be evaluated twice
    (tests/faults/test_crash_recovery.py shows the delay applied after a real crash; this
    counts the wrapping, which no clock can do reliably on a loaded machine)."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = True
    run = create([write("p1"), final("tool-1")], faults={"delay_ms": 1})
    command = plan_and_record_intent(run.run_id)
    wrapped: list[str] = []
    real_wrap = faults.faulted_contract

    def counting(contract, plan, run_id):  # type: ignore[no-untyped-def]
        wrapped.append(contract.name)
        return real_wrap(contract, plan, run_id)

    monkeypatch.setattr(faults, "faulted_contract", counting)
    registered = wiring.registry().get(command.tool_name, command.tool_version)
    how, execution = wiring.executor().recover(
        command, registered.contract, load(run.run_id), CancelSignal()
    )
    assert (how, execution.outcome.status.value) == ("re-executed", "succeeded")
    assert wrapped == ["write_artifact"]
