"""Cancellation (seed §7, §13; SPEC §4): new tools stop at once, the running tool gets the
signal, and the run reaches ``cancelled`` only once the effect is known (else failed + handoff).
Who cancelled and why is in the trace."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

import runs
from policy.domain.errors import NotFound
from policy.models import Confirmation
from policy.services import ConfirmationNotPending
from runs import services
from runs.domain.machine import Status
from tests.durable.conftest import PLUGINS
from tests.durable.durable_kit import Run, advance_in_thread, create, final, run_fixture, start, use
from tests.support.personas import make_user
from tests.support.workers import worker_database_url

pytestmark = pytest.mark.django_db(transaction=True)

BASE_DIR = Path(runs.__file__).resolve().parents[1]


def _waiting(plugin_tools) -> Run:
    run = create([use("p1", "durable_guarded"), final("tool-1")])
    state = services.run_advance(run_id=run.run_id)
    assert state.status is Status.WAITING_CONFIRMATION
    return Run(run.run_id)


def _cancel_requested(run: Run) -> list[tuple[str, str]]:
    return [
        (e["details"]["by"], e["details"]["reason"]) for e in run.events("run.cancel-requested")
    ]


def test_cancelling_a_waiting_run_ends_it_at_once_with_who_and_why(plugin_tools):
    waiting = _waiting(plugin_tools)
    state = services.run_cancel(run_id=waiting.run_id, by="operator-1", reason="not needed")
    assert (state.status, state.stop_reason) == (Status.CANCELLED, "CANCELLED")
    done = Run(waiting.run_id)
    done.check()
    assert _cancel_requested(done) == [("operator-1", "not needed")]
    assert done.events("run.stopped")[-1]["details"]["by"] == "operator-1"
    # The pending confirmation can no longer start the tool.
    pending = Confirmation.objects.get(run_id=waiting.run_id)
    with pytest.raises(ConfirmationNotPending):
        services.confirmation_decide(
            confirmation_id=pending.pk, approved=True, shown_hash=pending.proposal_hash, by="op"
        )
    assert services.run_advance(run_id=waiting.run_id).status is Status.CANCELLED
    assert plugin_tools.calls("durable_guarded") == []
    assert done.ledger == []


def test_a_cancelled_run_leaves_no_pending_confirmation_in_the_queue(plugin_tools):
    """Like the deadline sweeper (which expires it), a cancel closes the pending confirmation:
    the operator queue must not offer a decision that can only fail."""
    waiting = _waiting(plugin_tools)
    services.run_cancel(run_id=waiting.run_id, by="operator-1", reason="not needed")
    rows = Confirmation.objects.filter(run_id=waiting.run_id)
    statuses = list(rows.values_list("status", flat=True))
    assert "pending" not in statuses, statuses


def test_cancelling_a_running_run_between_tools_ends_it_at_once(plugin_tools):
    reviewer = make_user("carol", password="pw-carol-1")
    run = create([use("p1", "durable_steady"), final("tool-1")])
    start(run.run_id)
    state = services.run_cancel(run_id=run.run_id, by=reviewer, reason="wrong goal")
    assert (state.status, state.stop_reason) == (Status.CANCELLED, "CANCELLED")
    done = Run(run.run_id)
    done.check()
    assert _cancel_requested(done) == [("carol", "wrong goal")]
    transitions = done.transitions()
    assert transitions[-2:] == [("running", "cancelling"), ("cancelling", "cancelled")]
    # Nothing starts afterwards.
    services.run_advance(run_id=run.run_id)
    assert Run(run.run_id).ledger == []
    assert plugin_tools.calls("durable_steady") == []


def test_cancel_during_a_cooperative_tool_stops_it_and_no_second_tool_starts(plugin_tools):
    run = create(
        [use("p1", "durable_wait", seconds=5), use("p2", "durable_steady"), final("tool-1")],
        faults={"cancel_during_tool": {"tool": "durable_wait", "effect": "none"}},
    )
    # Had the signal not reached the 5 s tool, it would have succeeded: the failed row shows it
    # did (no bound on elapsed time).
    state = services.run_advance(run_id=run.run_id)
    assert (state.status, state.stop_reason) == (Status.CANCELLED, "CANCELLED")
    done = Run(run.run_id)
    done.check()
    assert _cancel_requested(done) == [("faultlab", "cancel_during_tool")]
    assert [(r["proposal_id"], r["status"]) for r in done.ledger] == [("p1", "failed")]
    assert [e["proposal_id"] for e in done.events("tool.started")] == ["p1"]
    assert [e["proposal_id"] for e in done.events("planner.output")] == ["p1"]
    assert plugin_tools.calls("durable_steady") == []
    names = done.names()
    assert names.index("run.cancel-requested") < names.index("tool.completed")
    assert done.handoffs() == []


def test_a_cancel_from_another_thread_reaches_the_running_tool(plugin_tools):
    """The cancel is a database write; the worker's watcher turns it into the tool's signal."""
    run = create([use("p1", "durable_wait", seconds=20), use("p2", "durable_steady")])
    worker, _ = advance_in_thread(run.run_id)
    try:
        assert plugin_tools.WAIT_STARTED.wait(10)
        state = services.run_cancel(run_id=run.run_id, by="ops", reason="operator stop")
        assert state.status is Status.CANCELLING  # a tool is active: not cancelled yet
    finally:
        worker.join(25)
    # The 20 s tool was stopped, not waited out: its row failed, the worker is done.
    assert not worker.is_alive()
    done = Run(run.run_id)
    done.check()
    assert (done.status, done.stop_reason) == ("cancelled", "CANCELLED")
    assert [r["status"] for r in done.ledger] == ["failed"]
    assert plugin_tools.calls("durable_steady") == []


def test_cancel_with_an_unknown_effect_ends_failed_with_a_handoff(run_output_root):
    path = Path(runs.__file__).parent / "fixtures" / "faultlab" / "cancel-unknown-effect.json"
    result = run_fixture(path)
    assert (result["state"]["status"], result["state"]["stop_reason"]) == (
        "failed",
        "TOOL_OUTCOME_UNKNOWN",
    )
    assert [r["status"] for r in result["ledger"]] == ["unknown"]
    assert len([e for e in result["trace"] if e["event"] == "tool.started"]) == 1
    run = Run(result["state"]["run_id"])
    assert run.open_handoff().reason == "TOOL_OUTCOME_UNKNOWN"


def test_cancel_run_command_reports_the_new_state(plugin_tools):
    waiting = _waiting(plugin_tools)
    out = io.StringIO()
    call_command(
        "cancel_run", waiting.run_id, "--by", "oncall", "--reason", "customer asked", stdout=out
    )
    assert out.getvalue().strip() == f"run {waiting.run_id}: cancelled (CANCELLED)"
    assert _cancel_requested(Run(waiting.run_id)) == [("oncall", "customer asked")]


def test_cancel_run_command_on_an_unknown_run_is_a_stable_error():
    with pytest.raises(CommandError) as caught:
        call_command("cancel_run", "run_does_not_exist", "--by", "oncall", "--reason", "x")
    assert str(caught.value).startswith(f"{NotFound.code}: ")
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_cancel_run_command_in_a_real_process_prints_the_code_and_no_traceback():
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "AGENTCONSOLE_TOOLS": PLUGINS,
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "cancel_run", "run_missing", "--by", "x", "--reason", "y"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOT_FOUND" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
