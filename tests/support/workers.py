"""Real Celery worker processes for tests (STYLE habit 13: correctness tests of workers use a
real worker, not eager mode). One launcher for tests/workers and tests/faults.

How a worker finds the database: pytest-django has created the test database by the time a
cluster starts (its fixtures depend on ``django_db_setup``), and ``connection.settings_dict``
then names it. The worker gets ``DATABASE_URL`` pointing there: on PostgreSQL the test process's
``DATABASE_URL`` with the database name replaced (``test_<name>``); on SQLite ``sqlite:///`` + the
absolute path of the test database file, checked to be a real file, not an in-memory database.

How it finds the broker: the test process's own broker settings, with a queue of its own.
With ``REDIS_URL`` set, the workers use that Redis database and consume only a fresh queue; the
test process routes ``runs.advance_run`` to it; every Redis key or binding naming that queue is
deleted at teardown. Without it, the filesystem transport in a fresh temporary folder
(``AGENTCONSOLE_BROKER_DIR`` for the workers; the same folders set on this process's Celery app
for the producer side), so a developer's worker on ``var/broker`` never sees a test task.

Teardown leaves nothing behind: every process started for a cluster carries a tag in its
environment (``tests.support.procs.TAG_ENV``); whatever still carries it after the workers
stopped is killed, by pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.db import connection

from bench.support.stack import forget_queue
from tests.support.procs import TAG_ENV, children, kill_all, tagged

BASE_DIR = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30


def worker_database_url() -> str:
    """A URL for the test database, for child processes (they read DATABASE_URL)."""
    name = connection.settings_dict["NAME"]
    if connection.vendor == "sqlite":
        name = str(name)
        if name == ":memory:" or "mode=memory" in name:
            pytest.fail(f"the test database {name!r} lives in memory: a worker cannot share it")
        path = Path(name).resolve()
        assert path.is_file(), f"no SQLite test database at {path}"
        return f"sqlite:///{path}"
    if connection.vendor == "postgresql":
        url = urlsplit(os.environ["DATABASE_URL"])
        return urlunsplit(url._replace(path=f"/{name}"))
    pytest.fail(f"no worker database URL for {connection.vendor}")


_TASK_ID = re.compile(r"runs\.advance_run\[([^\]]+)\]")


@dataclass
class Worker:
    process: subprocess.Popen[str]
    queue: str
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if " ready." in line:
                self.ready.set()

    def log(self, last: int = 60) -> str:
        return "\n".join(self.lines[-last:])

    def task_lines(self, outcome: str) -> list[str]:
        """Log lines of ``runs.advance_run`` tasks: ``received``, ``succeeded`` or ``raised``."""
        return [line for line in self.lines if "runs.advance_run[" in line and outcome in line]

    def busy(self) -> int:
        """Tasks this worker received and has not finished (by its log)."""

        def ids(*outcomes: str) -> set[str]:
            found = (_TASK_ID.search(line) for o in outcomes for line in self.task_lines(o))
            return {m.group(1) for m in found if m}

        return len(ids("received") - ids("succeeded", "raised"))

    def wait_idle(self, timeout_s: float = 60.0, quiet_s: float = 1.0) -> None:
        """Until every task received has finished and none came for ``quiet_s`` (a slice's
        hand-back or a cancel's message may still be on its way): a test's runs must not be
        read by the worker while the database is flushed after it (a TRUNCATE meeting a
        worker's read is a deadlock). Bounded by ``timeout_s``; not a speed claim."""
        last = {"received": -1, "at": time.monotonic()}

        def quiet() -> bool:
            received = len(self.task_lines("received"))
            if received != last["received"] or self.busy():
                last.update(received=received, at=time.monotonic())
                return False
            return time.monotonic() - last["at"] >= quiet_s

        wait_for(quiet, timeout_s=timeout_s, what="the worker idle", log=self.log,
                 check=worker_alive(self), poll_s=0.05)  # fmt: skip


@dataclass
class Cluster:
    queue: str
    tag: str
    env: dict[str, str]
    output_root: Path | None = None
    workers: list[Worker] = field(default_factory=list)

    def log(self, last: int = 40) -> str:
        return "\n\n".join(
            f"--- worker {i} (pid {w.process.pid}) ---\n{w.log(last)}"
            for i, w in enumerate(self.workers)
        )

    def task_lines(self, outcome: str) -> list[str]:
        return [line for w in self.workers for line in w.task_lines(outcome)]

    def sigkill_lines(self) -> list[str]:
        """Log lines of pool processes that died of SIGKILL."""
        return [line for w in self.workers for line in w.lines if "signal 9 (SIGKILL)" in line]

    def pool_children(self) -> list[int]:
        return [c.pid for w in self.workers for c in children(w.process.pid)]

    def check_alive(self) -> None:
        dead = [w for w in self.workers if w.process.poll() is not None]
        if dead:
            pytest.fail(f"a worker exited ({dead[0].process.returncode}):\n{self.log()}")


@contextlib.contextmanager
def producer_routed(queue: str, transport_options: dict[str, Any] | None) -> Iterator[None]:
    """Route ``runs.advance_run`` from this process to ``queue`` (for the filesystem transport,
    also to the cluster's folders). Celery caches the router and the connection pool on first
    use, so both are dropped on the way in and on the way out.

    kombu keeps its pools per broker URL and options in process-wide dicts, and the app's pool
    is also the entry of ``kombu.pools.connections`` for this URL: a pool force-closed but left
    there makes every later publish to the same URL (Redis: every module after the first) fail
    with "Acquire on closed pool". ``kombu.pools.reset`` closes and drops them all."""
    from agentconsole.celery import app

    def reset() -> None:
        from kombu import pools

        app.amqp.flush_routes()
        app.amqp.__dict__.pop("router", None)
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = None  # what Celery itself does after a fork
        app.amqp._producer_pool = None
        pools.reset()

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


def redis_cleanup(url: str, tag: str) -> None:
    forget_queue(url, tag)


def stop(processes: list[subprocess.Popen[str]]) -> None:
    """Stop workers together: warm shutdown first, then cold, then SIGKILL of their groups.

    Every run of the tests has come to rest before teardown, so nothing is lost by not waiting
    out a warm shutdown (an idle worker on the filesystem transport takes ~7 s; one whose pool
    process was killed waits ``worker_lost_wait`` for the lost job first). The loop below
    polls real processes, bounded by each signal's wait."""
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


def _filesystem_broker(
    tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]
) -> dict[str, Any] | None:
    """A private broker folder when the broker is the filesystem transport (else None)."""
    if not settings.CELERY_BROKER_URL.startswith(("agentfs://", "filesystem://")):
        return None
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
    return transport_options


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
    threading.Thread(target=worker.read, name="celery-worker-log", daemon=True).start()
    return worker


def _wait_ready(c: Cluster) -> None:
    """Poll the workers' logs for " ready." (real processes starting; bounded)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    for w in c.workers:
        while not w.ready.wait(0.1):
            if w.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"a test worker did not become ready:\n{c.log()}")


@contextlib.contextmanager
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    name: str = "test",
    workers: int = 1,
    concurrency: int = 1,
    extra_env: dict[str, str] | None = None,
    output_root: Path | None = None,
    via_script: bool = False,
) -> Iterator[Cluster]:
    """``workers`` Celery worker processes on one fresh queue; everything stopped at the end.
    With ``output_root``, the workers write run output there (``AGENTCONSOLE_RUN_OUTPUT_ROOT``).
    ``via_script``: started as production starts them, by scripts/worker.sh (its signal
    handling), with this cluster's queue, name and concurrency."""
    tag = uuid.uuid4().hex[:12]
    queue = f"agentconsole-{name}-{tag}"
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "DJANGO_SETTINGS_MODULE": "agentconsole.settings",
        "PYTHONPATH": str(BASE_DIR),
        "PYTHONUNBUFFERED": "1",
        TAG_ENV: tag,
        **({"AGENTCONSOLE_RUN_OUTPUT_ROOT": str(output_root)} if output_root else {}),
        **(extra_env or {}),
    }
    transport_options = _filesystem_broker(tmp_path_factory, env)
    celery = str(Path(sys.executable).with_name("celery"))
    env.setdefault("AGENTCONSOLE_BIN", str(Path(sys.executable).parent))
    c = Cluster(queue=queue, tag=tag, env=env, output_root=output_root)
    try:
        for i in range(workers):
            start = (
                [str(BASE_DIR / "scripts" / "worker.sh")]
                if via_script
                else [celery, "-A", "agentconsole", "worker", "--pool", "prefork"]
            )
            command = [
                *start,
                "--concurrency", str(concurrency), "-l", "info", "-Q", queue,
                "-n", f"w{i}-{queue}@%h",
                # No cluster chatter: these workers must not talk to (or wait for) anyone else's.
                "--without-mingle", "--without-gossip",
            ]  # fmt: skip
            c.workers.append(_start(command, env, queue))
        _wait_ready(c)
        with producer_routed(queue, transport_options):
            yield c
    finally:
        stop([w.process for w in c.workers])
        # Isolated tool children live in sessions of their own: the worker's group kill does
        # not reach them. Anything still carrying this cluster's tag is ours: kill it (polling
        # real processes, bounded).
        deadline = time.monotonic() + 5
        while (left := tagged(tag)) and time.monotonic() < deadline:
            kill_all(left)
            time.sleep(0.1)
        if settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
            redis_cleanup(settings.CELERY_BROKER_URL, queue)


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout_s: float,
    what: str,
    log: Callable[[], str] = str,
    check: Callable[[], None] | None = None,
    poll_s: float = 0.01,
) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that.

    It watches real processes (a worker, a tool's child) do their work, so it sleeps between
    polls; ``timeout_s`` is a generous bound that fails the test with ``log()``, never a
    claim about speed. ``check`` runs between polls (a dead worker fails at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s}s: {what}\n{log()}")
        if check is not None:
            check()
        time.sleep(poll_s)


def worker_alive(worker: Worker) -> Callable[[], None]:
    """A ``check`` for ``wait_for``: fail with the log as soon as the worker has exited."""

    def check() -> None:
        if worker.process.poll() is not None:
            pytest.fail(f"the worker exited with {worker.process.returncode}:\n{worker.log()}")

    return check
