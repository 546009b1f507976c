"""The pieces of the worker fixture: the worker handle, the database URL it gets, the producer
routing on this side, and teardown (see conftest.py for how they fit together)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

BASE_DIR = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 20


def worker_database_url() -> str:
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


@contextlib.contextmanager
def producer_routed(queue: str, transport_options: dict[str, Any] | None) -> Iterator[None]:
    """Route ``runs.advance_run`` from this process to ``queue`` (and, for the filesystem
    transport, to the worker's folders). Celery caches the router and the connection pool on
    first use, so both are dropped on the way in and on the way out."""
    from agentconsole.celery import app

    def reset() -> None:
        from kombu import pools

        app.amqp.flush_routes()
        app.amqp.__dict__.pop("router", None)
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = None  # what Celery itself does after a fork
        app.amqp._producer_pool = None
        # kombu keeps its pools per broker URL and options in process-wide dicts: on Redis the
        # next worker module's URL is the same, and would get the pool closed just above.
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
    import redis

    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(match=f"*{tag}*"):
            client.delete(key)
        for key in client.scan_iter(match="_kombu.binding.*"):
            for member in client.smembers(key):
                if tag.encode() in member:
                    client.srem(key, member)
        # Expiry entries of exchanges that no longer have any binding (ours were the last).
        for exchange in client.zrange("_kombu.binding_deadlines", 0, -1):
            if not client.exists(b"_kombu.binding." + exchange):
                client.zrem("_kombu.binding_deadlines", exchange)
    finally:
        client.close()


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # warm shutdown: finish the current task, then exit
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # The worker and its pool children share the process group we started it in.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
