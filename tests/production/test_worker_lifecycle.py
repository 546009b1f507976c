"""What a worker does at start and stop (agentconsole/worker_lifecycle.py): the leases of this
host's dead processes are released, the heartbeat is written and removed; and the JSON logs."""

from __future__ import annotations

import io
import json
import logging
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from agentconsole import heartbeat, logs, worker_lifecycle
from policy.log_context import run_context
from runs import models as m
from runs.leases import lease_taken_over, release_dead_local
from tests.api.api_kit import created_run
from tests.support.personas import make_user

DEAD_PID = 2**22 + 17  # above Linux's pid_max default: never a live process


@pytest.mark.django_db
def test_release_dead_local_lapses_only_dead_processes_of_this_host() -> None:
    alice = make_user("alice", "user")
    later = timezone.now() + timedelta(minutes=5)
    owners = {
        "dead": f"host-a:{DEAD_PID}:abcd",
        "alive": f"host-a:{os.getpid()}:abcd",
        "other-host": f"host-b:{DEAD_PID}:abcd",
        "handed-back": "queued:0123",
    }
    runs = {}
    for name, owner in owners.items():
        runs[name] = created_run(alice)
        m.Run.objects.filter(pk=runs[name]).update(lease_owner=owner, lease_expires_at=later)
    sent: list[list[str]] = []

    def record(sender: Any = None, run_ids: list[str] | None = None, **_: Any) -> None:
        sent.append(list(run_ids or []))

    lease_taken_over.connect(record, dispatch_uid="test-record")
    try:
        assert release_dead_local(host="host-a") == [runs["dead"]]
    finally:
        lease_taken_over.disconnect(dispatch_uid="test-record")
    rows = m.Run.objects.filter(pk__in=runs.values()).values_list(
        "id", "lease_owner", "lease_expires_at"
    )
    held = {run_id: (owner, expires) for run_id, owner, expires in rows}
    # The dead process's lease has lapsed, its name kept: the sweeper sees a worker that died.
    assert held[runs["dead"]][0] == owners["dead"]
    assert held[runs["dead"]][1] < timezone.now()
    for name in ("alive", "other-host", "handed-back"):
        assert held[runs[name]] == (owners[name], later)
    assert sent == [[runs["dead"]]]


@pytest.mark.django_db
def test_worker_start_and_stop_write_and_remove_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Any
) -> None:
    store = heartbeat.FileHeartbeats(tmp_path)
    monkeypatch.setattr(heartbeat, "store", lambda **_: store)
    settings.AGENTCONSOLE_WORKER_HEARTBEAT_S = 0.05

    class Consumer:
        hostname = "worker.1@test"

    before = time.time()
    worker_lifecycle.on_worker_ready(sender=Consumer())
    try:
        newest = store.newest()
        assert newest is not None
        assert newest >= before - 1
    finally:
        worker_lifecycle.on_worker_shutdown()
    assert store.newest() is None


def test_json_logs_carry_the_run_id_and_trace_ids() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.RunContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("tests.production.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("outside")
        with run_context("run_abc"):
            logger.warning("inside %s", "a run")
            logs.set_trace_ids_provider(lambda: {"trace_id": "t1", "span_id": "s1"})
            logger.warning("traced")
    finally:
        logs.set_trace_ids_provider(None)
        logger.removeHandler(handler)
    outside, inside, traced = (json.loads(line) for line in stream.getvalue().splitlines())
    assert "run_id" not in outside
    assert inside["run_id"] == "run_abc"
    assert inside["message"] == "inside a run"
    assert inside["level"] == "WARNING"
    assert "trace_id" not in inside
    assert (traced["trace_id"], traced["span_id"]) == ("t1", "s1")
