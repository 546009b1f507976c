"""The soak's processes: web (daphne), workers (``celery -A agentconsole worker``) and the beat
that schedules the sweeper, each in its own process group, started the way a deployment starts
them today. Workers have fixed Celery hostnames (``soak-w1@…``) and are restarted under the
same name after each SIGKILL.

Every process is stopped in the ``ExitStack`` the caller owns (SIGTERM to the group, then
SIGKILL), also when the soak fails; ``bench.support.stack._Proc`` does the process-group work.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.support.stack import START_TIMEOUT_S, _bin, _free_port, _Proc
from tests.support.procs import group


class SoakError(Exception):
    """The soak could not run (no PostgreSQL, a process that does not start, …)."""


@dataclass
class Worker:
    """One worker slot: a Celery hostname and the process currently serving it."""

    name: str
    argv: list[str]
    env: dict[str, str]
    proc: _Proc
    started_at: float = field(default_factory=time.monotonic)
    generation: int = 1
    # Seconds from each restart until the new process listened (as first seen by ``ready``).
    restart_s: list[float] = field(default_factory=list)
    ready_at: float | None = None  # when the current process was first seen listening

    def ready(self) -> bool:
        # "<name>@<host> ready." is logged at INFO once the consumer listens.
        if self.ready_at is not None:
            return self.proc.alive()
        if self.proc.alive() and " ready." in self.proc.text():
            self.ready_at = time.monotonic()
            if self.generation > 1:
                self.restart_s.append(self.ready_at - self.started_at)
            return True
        return False

    def up_for(self) -> float:
        """Seconds the current process has been listening (0 while it starts)."""
        return time.monotonic() - self.ready_at if self.ready() and self.ready_at else 0.0

    def pids(self) -> set[int]:
        """The worker's whole process group: the main process and its prefork children."""
        return {p.pid for p in group(self.proc.popen.pid)}


@dataclass
class Stack:
    web_ports: list[int]
    workers: list[Worker]
    beat: _Proc
    webs: list[_Proc] = field(default_factory=list)
    # Logs of killed processes, kept until the end so a failure can show what they said.
    graveyard: list[_Proc] = field(default_factory=list)

    def listening(self) -> int:
        """How many worker processes listen now (the rest are killed or restarting)."""
        return sum(1 for w in self.workers if w.ready())

    def live_pids(self) -> set[int]:
        pids: set[int] = set()
        for w in self.workers:
            pids |= w.pids()
        return pids


def _worker_argv(name: str, queues: list[str]) -> list[str]:
    return [
        _bin("celery"), "-A", "agentconsole", "worker", "--pool", "prefork", "-c", "1",
        "-l", "info", "-n", f"{name}@%h", "-Q", ",".join(queues),
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip


def start(
    stack: contextlib.ExitStack,
    env: dict[str, str],
    *,
    webs: int,
    workers: int,
    workdir: Path,
    prefix: str,
) -> Stack:
    """Start ``webs`` daphne processes, ``workers`` Celery workers and one beat; wait until the
    web processes answer and the workers listen."""
    started = [_start_web(stack, env) for _ in range(webs)]
    ports = [port for port, _ in started]
    beat_argv = [_bin("celery"), "-A", "agentconsole", "beat", "-l", "info",
                 "-s", str(workdir / "celerybeat-schedule")]  # fmt: skip
    # The sweep on the control queue (AGENTCONSOLE_CONTROL_QUEUE, set in soak.run), which every
    # worker also consumes: on the runs' queue a sweep would wait behind the whole backlog, and
    # so would every recovery it starts. Listed first, as env.queues declares it: a worker
    # looks at its queues in this order (Redis, settings' queue_order_strategy).
    sweep_queue = env["AGENTCONSOLE_CONTROL_QUEUE"]
    beat = _Proc("beat", beat_argv, env)
    stack.callback(beat.stop)
    slots = []
    for i in range(workers):
        # The prefix names this soak's queue too: its Redis cleanup finds the workers' bindings.
        name = f"{prefix}-w{i + 1}"
        argv = _worker_argv(name, [sweep_queue, env["AGENTCONSOLE_QUEUE"]])
        proc = _Proc(name, argv, env)
        slots.append(Worker(name=name, argv=argv, env=env, proc=proc))
    result = Stack(web_ports=ports, workers=slots, beat=beat, webs=[p for _, p in started])
    stack.callback(lambda: stop_all(result))
    wait_ready(result, timeout_s=START_TIMEOUT_S)
    return result


def _start_web(stack: contextlib.ExitStack, env: dict[str, str]) -> tuple[int, _Proc]:
    """A daphne process on a free port, once it answers ``/healthz``; its log stays readable
    (a 500 during the soak is explained by it)."""
    port = _free_port()
    argv = [_bin("daphne"), "-b", "127.0.0.1", "-p", str(port), "agentconsole.asgi:application"]
    proc = _Proc("web", argv, env)
    stack.callback(proc.stop)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if not proc.alive() or time.monotonic() > deadline:
            raise SoakError(f"daphne did not answer /healthz:\n{proc.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return port, proc
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)


def wait_ready(stack: Stack, *, timeout_s: float) -> None:
    """Wait until every worker listens (bounded); raise with the laggard's log."""
    deadline = time.monotonic() + timeout_s
    for w in stack.workers:
        while not w.ready():
            if not w.proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"worker {w.name} did not become ready:\n{w.proc.tail()}")
            time.sleep(0.2)


def kill(worker: Worker) -> None:
    """SIGKILL the worker's whole process group (prefork children too); wait until it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.proc.popen.pid, signal.SIGKILL)
    worker.proc.popen.wait(timeout=10)
    # The group SIGKILL reached the prefork child too, but it may linger a moment after its
    # leader (reaped by init): wait until the group is empty, so its pid counts as dead.
    deadline = time.monotonic() + 10
    while group(worker.proc.popen.pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def restart(stack: Stack, worker: Worker) -> None:
    """A new process under the same Celery hostname (it listens a few seconds later)."""
    stack.graveyard.append(worker.proc)
    worker.proc = _Proc(worker.name, worker.argv, worker.env)
    worker.started_at = time.monotonic()
    worker.generation += 1
    worker.ready_at = None


def stop_all(stack: Stack) -> None:
    for w in stack.workers:
        w.proc.stop()
    for dead in stack.graveyard:
        dead.stop()  # already gone: removes its log file
    stack.graveyard.clear()
