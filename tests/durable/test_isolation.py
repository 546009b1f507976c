"""Isolated tools (SPEC §4): run in a child process (``runs.engine.isolated_child``) that is killed
hard at the deadline; secrets are injected by the executor and never stored anywhere."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import pytest

from runs import services
from runs.domain.machine import Status
from runs.engine.isolation import MAX_OUTPUT_BYTES
from tests.durable.durable_kit import Run, advance_in_thread, create, final, isolated_children, use
from tests.support.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-durable-7f3a9c1e5b"


class ChildWatcher:
    """Samples this process's ``runs.engine.isolated_child`` processes while a run advances."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.01):
            self.seen |= isolated_children()

    def __enter__(self) -> ChildWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)


def test_an_isolated_tool_answers_from_its_child_process(child_env):
    run = create([use("p1", "durable_isolated_echo", text="hello child"), final("tool-1")])
    with ChildWatcher() as watcher:
        state = services.run_advance(run_id=run.run_id)
    assert state.status is Status.COMPLETED, state.stop_reason
    done = Run(run.run_id)
    done.check()
    assert [r["status"] for r in done.ledger] == ["succeeded"]
    value = done.observation("tool-1")["content"]["value"]
    assert value["echo"] == "hello child"
    assert value["ok"] is True
    # Computed in another process: the child's pid, which the watcher saw alive.
    assert value["pid"] != os.getpid()
    assert value["pid"] in watcher.seen
    assert isolated_children() == set()


@pytest.mark.parametrize(
    ("tool", "ledger", "stop_reason", "handoff"),
    [
        # A read has no effect to doubt: known not to have happened.
        ("durable_isolated_sleep", "failed", "TOOL_FAILED", False),
        # A write killed mid-way: nobody knows whether it took effect.
        ("durable_isolated_sleep_write", "unknown", "TOOL_OUTCOME_UNKNOWN", True),
    ],
)
def test_an_isolated_tool_past_its_timeout_is_killed(child_env, tool, ledger, stop_reason, handoff):
    run = create([use("p1", tool), use("p2", "durable_steady"), final("tool-1")])
    with ChildWatcher() as watcher:
        state = services.run_advance(run_id=run.run_id)
    # The tool sleeps 30 s; the TOOL_STOPPED outcome below shows it was killed, not waited out
    # (no bound on elapsed time: a loaded CI box can take seconds to spawn the child).
    assert watcher.seen, "no isolated child process was ever started"
    # Killed and reaped: no child remains. This polls a real process's exit (up to 10 s).
    returned = time.monotonic()
    while isolated_children() and time.monotonic() - returned < 10:
        time.sleep(0.02)
    assert isolated_children() == set()
    assert [pid for pid in watcher.seen if os.path.exists(f"/proc/{pid}")] == []

    assert (state.status, state.stop_reason) == (Status.FAILED, stop_reason)
    done = Run(run.run_id)
    done.check()
    [row] = done.ledger
    assert row["status"] == ledger
    assert row["outcome"]["code"] == "TOOL_STOPPED"
    assert [e["proposal_id"] for e in done.events("tool.started")] == ["p1"]
    assert bool(done.handoffs()) is handoff


def test_a_cancel_kills_a_running_isolated_tool_at_once(child_env):
    """A tool that ignores every cooperative signal, in a child: the cancel is a hard stop."""
    run = create([use("p1", "durable_isolated_hang"), use("p2", "durable_steady")])
    with ChildWatcher() as watcher:
        worker, _ = advance_in_thread(run.run_id)
        try:
            # Polls for the real child process to start (generous timeout).
            wait_for(lambda: watcher.seen, timeout_s=15, what="the isolated child started")
            services.run_cancel(run_id=run.run_id, by="ops", reason="hard stop")
        finally:
            worker.join(25)
    # The child ignores every cooperative signal and would hang for ever: the worker returning
    # at all (within the generous join) and TOOL_STOPPED show the hard stop reached it.
    assert not worker.is_alive(), "the child outlived the cancel"
    assert isolated_children() == set()
    done = Run(run.run_id)
    done.check()
    # A read killed mid-way has no effect to doubt: cancelled, and p2 never started.
    assert (done.status, done.stop_reason) == ("cancelled", "CANCELLED")
    assert [(r["proposal_id"], r["status"]) for r in done.ledger] == [("p1", "failed")]
    assert done.ledger[0]["outcome"]["code"] == "TOOL_STOPPED"


def test_secrets_reach_an_isolated_tool_but_are_never_stored(child_env, settings):
    settings.AGENTCONSOLE_TOOL_SECRETS = {
        "durable_isolated_secret": {"api_key": SECRET, "unlisted": "sk-not-declared-000"}
    }
    run = create([use("p1", "durable_isolated_secret", text="use the key"), final("tool-1")])
    state = services.run_advance(run_id=run.run_id)
    assert state.status is Status.COMPLETED, state.stop_reason
    done = Run(run.run_id)
    value = done.observation("tool-1")["content"]["value"]
    # The child used the key: its digest is the secret's digest...
    assert value["ok"] is True
    assert value["sha256"] == hashlib.sha256(SECRET.encode()).hexdigest()
    # Only the secrets the contract declares are injected.
    assert value["names"] == ["api_key"]
    # ...and the echo it carelessly returned was scrubbed before anything was stored.
    assert value["echo"] == "key=[REDACTED]"
    stored = json.dumps(done.data, default=str)
    assert SECRET not in stored
    assert "sk-not-declared-000" not in stored
    handoffs = json.dumps([h.bundle for h in done.handoffs()])
    assert SECRET not in handoffs


KIB = 1024


@pytest.mark.parametrize("tool", ["durable_isolated_big", "durable_isolated_big_write"])
def test_an_isolated_tool_may_answer_more_than_a_pipe_holds(child_env, tool):
    """issue 9 item 5: a 200 KiB outcome (over the 64 KiB pipe, under MAX_OUTPUT_BYTES) is read
    while the child runs: it succeeds. It used to block in write() until the deadline killed it
    (a write then ended unknown, with a handoff for nothing)."""
    run = create([use("p1", tool, size=200 * KIB), final("tool-1")], deadline_ms=600_000)
    state = services.run_advance(run_id=run.run_id)
    done = Run(run.run_id)
    done.check()
    assert [(r["status"], r["outcome"]["code"]) for r in done.ledger] == [("succeeded", None)]
    assert state.status is Status.COMPLETED, state.stop_reason
    assert len(done.observation("tool-1")["content"]["value"]["blob"]) == 200 * KIB
    assert done.handoffs() == []
    assert isolated_children() == set()


@pytest.mark.parametrize(
    ("tool", "ledger", "handoff"),
    [
        # A read has no effect: known not to have happened.
        ("durable_isolated_big", "failed", False),
        # A write printed its outcome after its effect: unknown (no reconcile: a person).
        ("durable_isolated_big_write", "unknown", True),
    ],
)
def test_an_isolated_tool_past_max_output_is_stopped_with_output_too_large(
    child_env, tool, ledger, handoff
):
    """issue 9 item 5: a 2 MiB outcome passes MAX_OUTPUT_BYTES: the child is killed and the
    call ends OUTPUT_TOO_LARGE (not TOOL_STOPPED at a deadline, which is 60 s away)."""
    assert 2 * KIB * KIB > MAX_OUTPUT_BYTES
    run = create([use("p1", tool, size=2 * KIB * KIB), final("tool-1")], deadline_ms=600_000)
    services.run_advance(run_id=run.run_id)
    done = Run(run.run_id)
    done.check()
    [row] = done.ledger
    assert (row["status"], row["outcome"]["code"]) == (ledger, "OUTPUT_TOO_LARGE")
    assert not any(o["citable"] for o in done.observations)
    assert bool(done.handoffs()) is handoff
    assert isolated_children() == set()


@pytest.mark.parametrize(("enabled", "ledger", "code"), [
    (True, "failed", "INJECTED_FAILURE"),
    (False, "succeeded", None),
])  # fmt: skip
def test_an_isolated_child_applies_a_fault_plan_only_when_its_parent_does(
    child_env, settings, enabled, ledger, code
):
    """issue 9 item 6: the child reads no fault plan unless the parent's executor is the fault
    layer; a plan already stored on a run does nothing once fault injection is off."""
    run = create(
        [use("p1", "durable_isolated_echo", text="hi"), final("tool-1")],
        faults={"tools": {"durable_isolated_echo": {"mode": "fail"}}},
    )
    settings.AGENTCONSOLE_FAULTS_ENABLED = enabled
    services.run_advance(run_id=run.run_id)
    [row] = Run(run.run_id).ledger
    assert (row["status"], row["outcome"]["code"]) == (ledger, code)
