"""Real worker processes for the fault tests, and the evidence they are judged by.

Builds on ``tests.workers.worker_kit`` (database URL for the worker, producer routing, Redis
cleanup, warm stop) and adds what crash and cancel tests need:

* ``cluster()`` -- one or more Celery workers consuming one fresh queue, on the test database
  and the test process's broker (Redis with ``REDIS_URL``; else a private filesystem broker
  folder via ``AGENTCONSOLE_BROKER_DIR``), with extra environment: crash faults allowed, a short
  lease, a run-output root shared with this process, the effect-log plugin tools.
* process inspection through ``/proc`` (psutil is not installed): children, process groups,
  the command line of an isolated tool's child.
* teardown that leaves nothing behind: every process started for a cluster carries a tag in its
  environment (inherited by pool children, isolated tool children and their children); whatever
  still carries it after the workers stopped is killed, by pid.
* ``wait_rest()`` -- poll until runs are terminal, running the sweeper (as its periodic task
  would) while a run holds a ``started`` ledger row under a lapsed lease; bounded.
* ``assert_consistent()`` -- a terminal run agrees with its ledger, handoff and trace.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from runs import models as m
from runs import services
from runs.domain.machine import TERMINAL
from runs.scenarios import Scenario, parse_scenario
from runs.sweeper import sweep
from tests.plugins.effect_log import read_store
from tests.workers.worker_kit import (
    BASE_DIR,
    READY_TIMEOUT_S,
    Worker,
    redis_cleanup,
    worker_database_url,
)

PLUGIN = "tests.plugins.effect_log"
TAG_ENV = "AGENTCONSOLE_FAULTS_TAG"
TERMINAL_VALUES = frozenset(s.value for s in TERMINAL)
SIGKILL_LINE = "signal 9 (SIGKILL)"


# --- processes (Linux /proc) -----------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    state: str
    starttime: int


def proc(pid: int) -> Proc | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid pgrp session ... starttime(22nd)"; comm may contain spaces.
    rest = raw[raw.rindex(")") + 2 :].split()
    return Proc(pid, int(rest[1]), int(rest[2]), rest[0], int(rest[19]))


def all_procs() -> list[Proc]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            p = proc(int(entry))
            if p is not None:
                out.append(p)
    return out


def alive(pid: int, starttime: int | None = None) -> bool:
    """Running (a zombie is dead; a reused pid with another start time is someone else)."""
    p = proc(pid)
    if p is None or p.state in ("Z", "X"):
        return False
    return starttime is None or p.starttime == starttime


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def environ_has(pid: int, needle: str) -> bool:
    try:
        return needle.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def children(pid: int) -> list[Proc]:
    return [p for p in all_procs() if p.ppid == pid]


def group(pgrp: int) -> list[Proc]:
    return [p for p in all_procs() if p.pgrp == pgrp and p.state not in ("Z", "X")]


def tagged(tag: str) -> list[Proc]:
    mine = os.getpid()
    return [
        p
        for p in all_procs()
        if p.pid != mine and p.state not in ("Z", "X") and environ_has(p.pid, f"{TAG_ENV}={tag}")
    ]


def kill_all(procs: Iterable[Proc]) -> list[int]:
    """SIGKILL each process that is still the one we saw (same start time); return their pids."""
    killed = []
    for p in procs:
        if alive(p.pid, p.starttime):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
                killed.append(p.pid)
    return killed


# --- workers -----------------------------------------------------------------------------------


@dataclass
class Cluster:
    queue: str
    tag: str
    output_root: Path
    env: dict[str, str]
    workers: list[Worker] = field(default_factory=list)

    def log(self, last: int = 40) -> str:
        return "\n\n".join(
            f"--- worker {i} (pid {w.process.pid}) ---\n{w.log(last)}"
            for i, w in enumerate(self.workers)
        )

    def task_lines(self, outcome: str) -> list[str]:
        return [line for w in self.workers for line in w.task_lines(outcome)]

    def sigkill_lines(self) -> list[str]:
        return [line for w in self.workers for line in w.lines if SIGKILL_LINE in line]

    def pool_children(self) -> list[int]:
        return [c.pid for w in self.workers for c in children(w.process.pid)]

    def check_alive(self) -> None:
        dead = [w for w in self.workers if w.process.poll() is not None]
        if dead:
            pytest.fail(f"a worker exited ({dead[0].process.returncode}):\n{self.log()}")


@contextlib.contextmanager
def producer_routed(queue: str, transport_options: dict[str, Any] | None) -> Iterator[None]:
    """Route ``runs.advance_run`` from this process to ``queue`` (for the filesystem transport,
    also to the cluster's folders).

    Like ``tests.workers.worker_kit.producer_routed``, but it drops kombu's process-wide pool
    groups (``kombu.pools.reset``) instead of only force-closing the app's pool: that pool is
    also the entry of ``kombu.pools.connections`` for this broker URL, and a closed entry left
    there makes every later publish to the same URL (Redis: every module after the first)
    fail with "Acquire on closed pool"."""
    from kombu import pools

    from agentconsole.celery import app

    def reset() -> None:
        app.amqp.flush_routes()
        app.amqp.__dict__.pop("router", None)
        pools.reset()
        app._pool = None
        app.amqp._producer_pool = None

    saved = {k: app.conf[k] for k in ("task_routes", "broker_transport_options")}
    app.conf.task_routes = {"runs.advance_run": {"queue": queue}}
    if transport_options is not None:
        app.conf.broker_transport_options = transport_options
    reset()
    try:
        yield
    finally:
        app.conf.update(saved)
        reset()


def stop(processes: list[subprocess.Popen[str]]) -> None:
    """Stop workers together: warm shutdown first, then cold, then SIGKILL of their groups.

    Every run of these tests has come to rest before teardown, so nothing is lost by not
    waiting out a warm shutdown (an idle worker on the filesystem transport takes ~7 s; one
    whose pool process was killed waits ``worker_lost_wait`` for the lost job first)."""
    for sig, wait_s in ((signal.SIGTERM, 1.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 10.0)):
        running = [p for p in processes if p.poll() is None]
        if not running:
            return
        for p in running:
            with contextlib.suppress(ProcessLookupError):
                if sig is signal.SIGKILL:
                    os.killpg(p.pid, sig)  # the worker and its pool share the group we gave it
                else:
                    p.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while any(p.poll() is None for p in running) and time.monotonic() < deadline:
            time.sleep(0.05)


def _start(command: list[str], env: dict[str, str], queue: str) -> Worker:
    process = subprocess.Popen(
        command,
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    worker = Worker(process, queue)
    threading.Thread(target=worker.read, name="fault-worker-log", daemon=True).start()
    return worker


@contextlib.contextmanager
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    workers: int = 1,
    concurrency: int = 1,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Cluster]:
    """``workers`` Celery worker processes on one fresh queue; everything stopped at the end."""
    tag = uuid.uuid4().hex[:12]
    queue = f"agentconsole-faults-{tag}"
    output_root = tmp_path_factory.mktemp("run-output")
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "DJANGO_SETTINGS_MODULE": "agentconsole.settings",
        "PYTHONPATH": str(BASE_DIR),
        "PYTHONUNBUFFERED": "1",
        "AGENTCONSOLE_RUN_OUTPUT_ROOT": str(output_root),
        "AGENTCONSOLE_TOOLS": PLUGIN,
        "AGENTCONSOLE_FAULTS_ENABLED": "1",  # off by default: the workers inject faults here
        TAG_ENV: tag,
        **(extra_env or {}),
    }
    transport_options = None
    if settings.CELERY_BROKER_URL.startswith(("agentfs://", "filesystem://")):
        folder = tmp_path_factory.mktemp("broker")
        transport_options = {  # the layout agentconsole/settings.py derives from the folder
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
            "polling_interval": 0.05,
        }
        for key in ("data_folder_in", "processed_folder", "control_folder"):
            Path(transport_options[key]).mkdir(parents=True, exist_ok=True)
        env["AGENTCONSOLE_BROKER_DIR"] = str(folder)
    celery = str(Path(sys.executable).with_name("celery"))
    c = Cluster(queue=queue, tag=tag, output_root=output_root, env=env)
    try:
        for i in range(workers):
            command = [
                celery, "-A", "agentconsole", "worker", "--pool", "prefork",
                "--concurrency", str(concurrency), "-l", "info", "-Q", queue,
                "-n", f"w{i}-{queue}@%h", "--without-mingle", "--without-gossip",
            ]  # fmt: skip
            c.workers.append(_start(command, env, queue))
        deadline = time.monotonic() + READY_TIMEOUT_S
        for w in c.workers:
            while not w.ready.wait(0.1):
                if w.process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"a fault-test worker did not become ready:\n{c.log()}")
        with producer_routed(queue, transport_options):
            yield c
    finally:
        stop([w.process for w in c.workers])
        # Isolated tool children live in sessions of their own: the worker's group kill does
        # not reach them. Anything still carrying this cluster's tag is ours: kill it.
        deadline = time.monotonic() + 5
        while (left := tagged(tag)) and time.monotonic() < deadline:
            kill_all(left)
            time.sleep(0.1)
        if settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
            redis_cleanup(settings.CELERY_BROKER_URL, queue)


# --- runs --------------------------------------------------------------------------------------


def describe(run_id: str) -> str:
    run = m.Run.objects.filter(pk=run_id).first()
    if run is None:
        return f"{run_id}: missing"
    ledger = list(run.ledger.values_list("tool_name", "status", "attempt"))
    handoffs = list(run.handoffs.values_list("reason", "status"))
    events = list(
        m.TraceEvent.objects.filter(run=run).order_by("sequence").values_list("event", flat=True)
    )
    return (
        f"{run_id}: {run.status} ({run.stop_reason}) lease={run.lease_owner}@"
        f"{run.lease_expires_at} ledger={ledger} handoffs={handoffs}\n  trace={events}"
    )


def wait_rest(
    run_ids: Iterable[str],
    c: Cluster,
    *,
    timeout_s: float = 30,
    sweep_every_s: float = 1.0,
) -> dict[str, m.Run]:
    """Poll until every run is terminal. While a run holds a ``started`` ledger row and its
    lease has lapsed (its worker died), sweep into the cluster's queue at most every
    ``sweep_every_s`` -- what the periodic sweep task does in production."""
    run_ids = list(run_ids)
    poll_s = 0.05 if len(run_ids) < 10 else 0.25  # light on a small machine's database
    deadline = time.monotonic() + timeout_s
    last_sweep = 0.0
    while True:
        statuses = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "status"))
        waiting = [r for r in run_ids if statuses.get(r) not in TERMINAL_VALUES]
        if not waiting:
            return {r.pk: r for r in m.Run.objects.filter(pk__in=run_ids)}
        if time.monotonic() > deadline:
            pytest.fail(
                f"{len(waiting)} run(s) not terminal after {timeout_s}s:\n"
                + "\n".join(describe(r) for r in waiting[:5])
                + f"\n{c.log()}"
            )
        c.check_alive()
        if time.monotonic() - last_sweep >= sweep_every_s:
            lapsed = Q(lease_expires_at__lt=timezone.now()) | Q(lease_owner__isnull=True)
            stranded = (
                m.Run.objects.filter(pk__in=waiting, ledger__status="started")
                .filter(lapsed)
                .exists()
            )
            if stranded:
                last_sweep = time.monotonic()
                sweep(queue=c.queue)
        time.sleep(poll_s)


def wait_for(predicate: Any, *, timeout_s: float, what: str, c: Cluster | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s}s: {what}\n{c.log() if c else ''}")
        if c is not None:
            c.check_alive()
        time.sleep(0.01)


def events(run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    return list(
        m.TraceEvent.objects.filter(run_id=run_id)
        .order_by("sequence")
        .values_list("sequence", "event", "details")
    )


def assert_consistent(run: m.Run) -> None:
    """A resting run agrees with its ledger, its handoffs and its trace."""
    run.refresh_from_db()
    where = describe(run.pk)
    assert run.status in TERMINAL_VALUES, where
    ledger = list(run.ledger.all())
    statuses = [row.status for row in ledger]
    assert "started" not in statuses, f"a ledger row was left started: {where}"
    open_handoffs = list(run.handoffs.exclude(status="resolved"))
    assert len(open_handoffs) <= 1, where
    if run.status == "completed":
        assert set(statuses) <= {"succeeded", "reconciled"}, where
        assert not open_handoffs, where
        assert run.answer, where
    if run.status == "cancelled":
        # cancelled only once the effect was checked: nothing unknown remains.
        assert not set(statuses) & {"unknown", "compensation-required"}, where
        assert not open_handoffs, where
    unresolved = [row for row in ledger if row.status in ("unknown", "compensation-required")]
    if unresolved:
        # An effect nobody could check never ends silently: failed, with a handoff naming it.
        assert run.status == "failed", where
        assert open_handoffs, where
        named = {e["idempotency_token"] for e in open_handoffs[0].bundle["unknown_effects"]}
        assert {row.idempotency_token for row in unresolved} <= named, where
        for e in open_handoffs[0].bundle["unknown_effects"]:
            assert e["status"] in ("unknown", "compensation-required"), where
    if open_handoffs:
        assert run.status == "failed", where
    trace = events(run.pk)
    assert [seq for seq, _, _ in trace] == list(range(1, len(trace) + 1)), where
    assert run.trace_seq == len(trace), where
    started = [d for _, name, d in trace if name == "tool.started"]
    assert len(started) == len(ledger), f"one tool.started per ledger row: {where}"
    assert len({row.idempotency_token for row in ledger}) == len(ledger), where


# --- scenarios ---------------------------------------------------------------------------------

FIXTURES = BASE_DIR / "runs" / "fixtures"


def fixture_scenario(name: str) -> Scenario:
    """A scenario file from runs/fixtures, with a subject of its own (evidence never mixes)."""
    scenario = parse_scenario((FIXTURES / name).read_bytes())
    return scenario.model_copy(update={"subject": f"faults-{uuid.uuid4().hex[:8]}"})


def effect_scenario(
    tool: str,
    arguments: dict[str, Any],
    *,
    faults: dict[str, Any] | None = None,
    deadline_ms: int = 120_000,
) -> Scenario:
    """One effect-log tool call, then a final answer citing its result."""
    return Scenario.model_validate(
        {
            "subject": f"faults-{uuid.uuid4().hex[:8]}",
            "goal": f"Call {tool} once, then answer.",
            "budgets": {"max_steps": 4, "max_tool_calls": 2, "max_repeated_proposal": 2,
                        "deadline_ms": deadline_ms},
            "grants": [{"capability": "effectlog:write", "resource_scope": "*",
                        "expires_at_step": 4}],
            "planner": [
                {"kind": "tool", "proposal_id": "p1", "tool_name": tool, "tool_version": "1",
                 "arguments": arguments},
                {"kind": "final", "answer": "Done.", "citation_observation_ids": ["tool-1"]},
            ],
            "faults": faults,
        }
    )  # fmt: skip


def create(scenario: Scenario, c: Cluster) -> str:
    """Create the run and enqueue it on the cluster's queue (what faultlab does)."""
    state = services.run_create(
        subject=scenario.subject,
        goal=scenario.goal,
        budgets=scenario.budgets,
        grants=[g.model_dump(exclude_unset=True) for g in scenario.grants],
        planner={"kind": "fixture", "outputs": scenario.planner},
        faults=scenario.faults.model_dump() if scenario.faults else None,
        enqueue=True,
        queue=c.queue,
    )
    return state.run_id


def effects_of(c: Cluster, run_id: str) -> list[dict[str, Any]]:
    """The effect-log lines one run caused (the external system's own count)."""
    return [line for line in read_store(c.output_root) if line["run_id"] == run_id]


def names(run_id: str) -> list[str]:
    return [name for _, name, _ in events(run_id)]
