"""What a worker does at start and stop (agentconsole/ops/worker_lifecycle.py): the leases of this
host's dead processes are released, the heartbeat is written and removed; and the JSON logs."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from agentconsole.config import env
from agentconsole.kernel.log_context import run_context
from agentconsole.ops import heartbeat, logs, worker_lifecycle
from runs import models as m
from runs import services
from runs.engine.leases import lease_taken_over, local_host, local_pid_alive, release_dead_local
from runs.engine.sweeper import recover_dead_local, sweep
from tests.api.api_kit import created_run
from tests.support.personas import make_user
from tests.support.workers import wait_for

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


def test_a_process_that_exited_and_waits_to_be_reaped_reads_as_dead() -> None:
    """A zombie answers ``kill(pid, 0)``; the soak's orphaned pool processes stayed zombies for
    1-2 s (the host's init reaps slowly), and their runs waited that long for no reason."""
    child = subprocess.Popen(["true"])  # not waited for: a zombie once it exits
    try:
        wait_for(lambda: _state(child.pid) == "Z", timeout_s=10, what="the child exited unreaped")
        assert local_pid_alive(child.pid) is False
        assert local_pid_alive(os.getpid()) is True
    finally:
        child.wait()
    assert local_pid_alive(child.pid) is False


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]


@pytest.mark.django_db
def test_a_worker_sharing_the_hostname_in_another_pid_namespace_is_not_judged() -> None:
    """Containers sharing their node's hostname (Kubernetes hostNetwork) have pid namespaces of
    their own: a pid that does not exist here may be a live worker there."""
    alice = make_user("alice", "user")
    later = timezone.now() + timedelta(minutes=5)
    run_id = created_run(alice)
    elsewhere = f"{socket.gethostname()}:{DEAD_PID}:abcd"  # no namespace: not from here
    m.Run.objects.filter(pk=run_id).update(lease_owner=elsewhere, lease_expires_at=later)

    assert local_host() != socket.gethostname()
    assert release_dead_local() == []
    assert m.Run.objects.filter(pk=run_id, lease_expires_at=later).exists()


@pytest.mark.django_db
def test_a_dead_processes_run_is_sent_on_once_on_the_recovery_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the reaper does each round: an active run a dead process holds is sent on at once;
    a live process's run, a settled run and a run already sent are left alone."""
    sent: list[tuple[str, str | None]] = []
    monkeypatch.setattr(
        services, "enqueue_advance", lambda run_id, **kw: sent.append((run_id, kw["queue"]))
    )
    alice = make_user("alice", "user")
    later = timezone.now() + timedelta(minutes=5)
    runs = {}
    for name, owner in {
        "dead": f"host-a:{DEAD_PID}:abcd",
        "alive": f"host-a:{os.getpid()}:abcd",
        "settled": f"host-a:{DEAD_PID}:ef01",
    }.items():
        runs[name] = created_run(alice)
        m.Run.objects.filter(pk=runs[name]).update(lease_owner=owner, lease_expires_at=later)
    m.Run.objects.filter(pk=runs["settled"]).update(status="completed")

    assert recover_dead_local(queue="runs-control", host="host-a") == [runs["dead"]]
    assert sent == [(runs["dead"], "runs-control")]
    # Reserved for the message just sent: neither the next round nor a sweep sends another.
    owner = m.Run.objects.get(pk=runs["dead"]).lease_owner or ""
    assert owner.startswith("queued:resent-")
    assert recover_dead_local(queue="runs-control", host="host-a") == []
    assert runs["dead"] not in sweep(enqueue=True, recovery_queue="runs-control").requeued
    assert sent == [(runs["dead"], "runs-control")]
    assert m.Run.objects.get(pk=runs["alive"]).lease_expires_at == later


@pytest.mark.django_db(transaction=True)
def test_a_forked_pool_process_leaves_its_parents_database_sessions_alone() -> None:
    """The reaper uses the database from a worker's main process; a pool process it forks later
    inherits that pool, and Celery's fixup closes it there (``close_pool``), which ended the
    parent's PostgreSQL sessions. ``forget_inherited_pools`` (run in the child at fork) sets the
    inherited pool aside first. Real fork, real PostgreSQL; the sessions' backend pids tell."""
    if connection.vendor != "postgresql" or not connection.settings_dict["OPTIONS"].get("pool"):
        pytest.skip("a PostgreSQL connection pool is what a child inherits")

    def backend_pid() -> int:  # in a thread of its own, as the reaper: a pooled connection
        pids: list[int] = []

        def query() -> None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pids.append(cursor.fetchone()[0])
            finally:
                connections.close_all()  # back to the pool, as the reaper does between rounds

        thread = threading.Thread(target=query)
        thread.start()
        thread.join(30)
        return pids[0]

    def sessions() -> set[int]:
        # The pool hands its idle connections out in turn: enough rounds to meet each of them.
        return {backend_pid() for _ in range(2 * env.postgres_pool()["max_size"])}

    before = sessions()
    child = os.fork()
    if child == 0:  # the pool process: what happens in it at fork, then Celery's fixup
        code = 1
        try:
            worker_lifecycle.forget_inherited_pools()
            connection.close_pool()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # A session the child ended would have been replaced (health checks): a new backend pid.
    assert sessions() == before


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
