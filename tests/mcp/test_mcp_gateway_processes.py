"""MCP tool calls made by the gateway on real processes (issue 22 item 4): one Celery worker
process, a gateway process (``manage.py gateway``) and the notes server over streamable HTTP,
whose ``nap`` and ``slow_post`` take their time.

- More runs than worker processes all wait on the server at once: the worker is free while
  the server works.
- SIGKILL of the gateway while the server works: a read is sent once more and the run
  completes; a write that cannot be repeated is not sent again (unknown: a person decides).
- A cancel reaches a run waiting on its tool: cancelled, the call abandoned.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runs import models as m
from runs import services
from runs.domain.gateway.calls import CallStatus
from tests.mcp.mcp_kit import READ_POLICY, TOKEN, NotesServer, http_server
from tests.mcp.test_mcp_gateway import SLOW_WRITE_POLICY, tool_calls
from tests.mcp.test_mcp_runs import grant, register_and_accept, start
from tests.support import workers as w
from tests.support.gateways import Gateways
from tests.support.planner import tool_call

pytestmark = [
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_registry"),
]

WAIT_S = 90  # a bound on real processes starting and calling, not a speed claim


class Stack:
    def __init__(self, notes: NotesServer, cluster: w.Cluster, gateways: Gateways) -> None:
        self.notes, self.cluster, self.gateways = notes, cluster, gateways

    def log(self) -> str:
        return self.cluster.log() + self.gateways.log()

    def wait(self, predicate: Any, what: str) -> Any:
        return w.wait_for(predicate, timeout_s=WAIT_S, what=what, log=self.log)


@pytest.fixture
def inline_calls(settings: Any) -> None:
    """The deployment defers calls (overrides the inline mode of tests/mcp/conftest.py)."""
    settings.AGENTCONSOLE_MODEL_CALLS = "gateway"


# The workers' deployment: the gateway defers calls, and its lease is short so a killed
# gateway's call is taken over within seconds.
ENV = {
    "AGENTCONSOLE_MODEL_CALLS": "gateway",
    "AGENTCONSOLE_MCP_SECRETS": json.dumps({"NOTES_TOKEN": TOKEN}),
    "AGENTCONSOLE_GATEWAY_LEASE_S": "2",
    "AGENTCONSOLE_GATEWAY_POLL_S": "0.1",
}


@pytest.fixture(scope="module")
def cluster(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[w.Cluster]:
    """One worker process with one pool process for the module (a start and a stop cost
    seconds each): whatever runs at once is not a worker's. Each test's runs are its own."""
    with w.cluster(tmp_path_factory, name="mcpgw", concurrency=1, extra_env=ENV) as c:
        yield c


@pytest.fixture
def stack(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mcp_secrets: None,
    cluster: w.Cluster,
) -> Iterator[Stack]:
    """The test's own notes server and gateways (a test kills gateways) beside the module's
    worker."""
    for notes in http_server(tmp_path):
        logs = tmp_path_factory.mktemp("gateway-logs")
        gateways = Gateways({**cluster.env, "AGENTCONSOLE_QUEUE": cluster.queue}, logs)
        try:
            yield Stack(notes, cluster, gateways)
        finally:
            gateways.stop()


def _status(run_id: str) -> str:
    return str(m.Run.objects.get(pk=run_id).status)


def _nap_run(server: str, topic: str, seconds: float) -> str:
    run = start(
        [
            tool_call("p1", f"mcp__{server}__nap", {"topic": topic, "seconds": seconds}),
            {"kind": "final", "answer": "Read.", "citation_observation_ids": ["tool-1"]},
        ],
        [grant("notes:read", f"mcp/{server}")],
    )
    return run.run_id


def test_more_runs_than_worker_processes_all_wait_on_the_server_at_once(stack: Stack) -> None:
    server = register_and_accept(stack.notes, nap=READ_POLICY)
    stack.gateways.start()
    runs = [_nap_run(server, f"topic {i}", 4.0) for i in range(4)]
    for run_id in runs:
        services.enqueue_advance(run_id)

    # Four naps in flight at once, one worker process: none of them holds it.
    stack.wait(
        lambda: (
            len(stack.notes.calls("nap")) == 4
            and m.ModelCall.objects.filter(kind="tool", status=CallStatus.SENDING).count() == 4
        ),
        "every run's call in flight at once",
    )
    assert len(stack.cluster.pool_children()) == 1
    stack.wait(lambda: all(_status(r) == "completed" for r in runs), "all runs done")
    assert len(stack.notes.calls("nap")) == 4  # each sent once


def test_a_read_whose_gateway_is_killed_mid_call_is_sent_once_more(stack: Stack) -> None:
    server = register_and_accept(stack.notes, nap=READ_POLICY)
    first = stack.gateways.start()
    run_id = _nap_run(server, "retries", 4.0)
    services.enqueue_advance(run_id)
    stack.wait(lambda: stack.notes.calls("nap"), "the server works on the call")

    stack.gateways.kill(first)
    stack.gateways.start()
    stack.wait(lambda: _status(run_id) == "completed", "the run completes")
    assert len(stack.notes.calls("nap")) == 2  # once more, no more
    (call,) = tool_calls(run_id)
    outcomes = list(call.attempt_rows.order_by("attempt").values_list("outcome", flat=True))
    assert outcomes == ["lost", "succeeded"]
    tokens = {c["meta"]["agentconsole/idempotency-token"] for c in stack.notes.calls("nap")}
    assert tokens == {m.LedgerEntry.objects.get(run_id=run_id).idempotency_token}


def test_a_write_whose_gateway_is_killed_mid_call_is_not_sent_again(stack: Stack) -> None:
    server = register_and_accept(stack.notes, slow_post=SLOW_WRITE_POLICY)
    first = stack.gateways.start()
    run = start(
        [tool_call("p1", f"mcp__{server}__slow_post", {"text": "hi", "seconds": 4.0})],
        [grant("notes:write", f"mcp/{server}")],
    )
    services.enqueue_advance(run.run_id)
    stack.wait(lambda: stack.notes.calls("slow_post"), "the server works on the write")

    stack.gateways.kill(first)
    stack.gateways.start()
    stack.wait(lambda: _status(run.run_id) == "failed", "the run stops")
    entry = m.LedgerEntry.objects.get(run_id=run.run_id)
    assert (entry.status, entry.outcome["code"]) == ("unknown", "GATEWAY_LOST")
    assert m.Handoff.objects.filter(run_id=run.run_id, reason="TOOL_OUTCOME_UNKNOWN").exists()
    assert len(stack.notes.calls("slow_post")) == 1  # never sent blind


def test_a_cancel_reaches_a_run_waiting_on_its_tool(stack: Stack) -> None:
    server = register_and_accept(stack.notes, nap=READ_POLICY)
    stack.gateways.start()
    run_id = _nap_run(server, "cancel me", 30.0)
    services.enqueue_advance(run_id)
    stack.wait(lambda: stack.notes.calls("nap"), "the server works on the call")

    services.run_cancel(run_id=run_id, reason="no longer needed", enqueue=True)
    stack.wait(lambda: _status(run_id) == "cancelled", "the run is cancelled")
    (call,) = tool_calls(run_id)
    assert call.status == CallStatus.ABANDONED
    entry = m.LedgerEntry.objects.get(run_id=run_id)
    assert (entry.status, entry.outcome["code"]) == ("failed", "CANCELLED")
    # The gateway let go of the call (its attempt closed as abandoned) long before the nap ends.
    stack.wait(
        lambda: call.attempt_rows.filter(outcome="abandoned").exists(),
        "the gateway stops waiting on the call",
    )
