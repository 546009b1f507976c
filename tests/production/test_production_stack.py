"""The production configuration, started for real (issue 14, "Done when"): DEBUG=0, PostgreSQL,
a Redis of its own, collected static files; web, worker and beat each started by its own script
(scripts/web.sh, scripts/worker.sh, scripts/beat.sh) in its own process group, as a supervisor
would.

Checks: `check --deploy` is clean with the documented environment; hashed, compressed static
files are served (the console's, the admin's, Swagger's); /readyz is ready, goes unready when
the broker (this test's own redis-server) stops and ready again when it is back; /metrics
refuses anonymous callers; SIGTERM to each process group leaves no process of it and no lease;
concurrent API requests hold no more PostgreSQL connections than the web process's pool allows
(the soak found per-thread persistent connections exhausting the server's client limit).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection
from django.utils import timezone

from agentconsole.ops import heartbeat
from runs import models as m
from runs.engine.leases import HANDED_BACK
from tests.production.prod_kit import production_env
from tests.support.procs import group, kill_all
from tests.support.workers import worker_database_url

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.worker,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

ROOT = Path(__file__).resolve().parents[2]
# Upper bound for one process group to end after SIGTERM: the worker's soft shutdown
# (AGENTCONSOLE_WORKER_SHUTDOWN_S, 10 s) plus its pool's and broker's teardown.
STOP_BOUND_S = 40
STARTUP_S = 90
POOL_MAX = 3  # the web process's connection pool in this test (DB_POOL_MAX_SIZE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _requirements() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the production stack test needs PostgreSQL: set DATABASE_URL=postgres://…")
    if shutil.which("redis-server") is None:
        pytest.skip("the production stack test needs the redis-server binary (its own broker)")


@dataclass
class Redis:
    """A redis-server of this test's own, on a free port: stopping it never touches the shared
    one other tests and helpers use."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait(lambda: _port_open(self.port), 20, "redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(condition: Callable[[], Any], timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(message)


@dataclass
class Stack:
    port: int
    env: dict[str, str]
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, script: str) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.processes[name] = subprocess.Popen(
            [str(ROOT / "scripts" / script)],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a supervisor starts it
        )

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", headers=headers or {}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    def readyz(self) -> tuple[int, dict[str, Any]]:
        try:
            status, _headers, body = self.get("/readyz")
        except OSError:
            return 0, {}
        return status, json.loads(body)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Redis]:
    _requirements()
    server = Redis(port=_free_port(), folder=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stack(redis_server: Redis, tmp_path: Path) -> Iterator[Stack]:
    env = {
        **os.environ,
        **production_env(),
        "DATABASE_URL": worker_database_url(),
        "REDIS_URL": redis_server.url,
        "STATIC_ROOT": str(tmp_path / "static"),
        "PORT": str(_free_port()),
        "AGENTCONSOLE_METRICS_TOKEN": "metrics-" + os.urandom(16).hex(),
        "DB_POOL_MAX_SIZE": str(POOL_MAX),
        "AGENTCONSOLE_WORKER_HEARTBEAT_S": "1",
        "AGENTCONSOLE_READY_HEARTBEAT_MAX_AGE_S": "10",
        "BEAT_SCHEDULE": str(tmp_path / "celerybeat-schedule"),
        "WORKER_NAME": f"prodtest.{os.getpid()}@%h",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("CELERY_BROKER_URL", None)
    env["AGENTCONSOLE_BIN"] = str(Path(sys.executable).parent)
    logs = tmp_path / "logs"
    logs.mkdir()
    s = Stack(port=int(env["PORT"]), env=env, logs=logs)
    try:
        yield s
    finally:
        for process in s.processes.values():
            kill_all(group(process.pid))
            process.wait(10)


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_production_configuration_end_to_end(stack: Stack, redis_server: Redis) -> None:
    # 1. The deployment checks pass with the documented production environment.
    checked = _manage(stack.env, "check", "--deploy", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "no issues" in checked.stdout

    # 2. collectstatic into the temporary STATIC_ROOT, then the three processes.
    collected = _manage(stack.env, "collectstatic", "--noinput", "-v0")
    assert collected.returncode == 0, collected.stderr
    for name in ("web", "worker", "beat"):
        stack.start(name, f"{name}.sh")
    ready = _wait(lambda: stack.readyz()[0] == 200, STARTUP_S, "never ready")
    assert ready, {n: stack.log(n) for n in stack.processes}

    _static_files_served(stack)
    _connections_bounded_by_the_pool(stack)
    _metrics_refuse_anonymous(stack)
    _readiness_follows_the_broker(stack, redis_server)
    _sigterm_leaves_nothing(stack)


def _static_files_served(stack: Stack) -> None:
    manifest = json.loads((Path(stack.env["STATIC_ROOT"]) / "staticfiles.json").read_text())
    paths = manifest["paths"]
    https = {"X-Forwarded-Proto": "https"}  # as the TLS proxy says (SECURE_PROXY_SSL_HEADER)
    for source in (
        "console/console.css",
        "admin/css/base.css",
        "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
    ):
        hashed = paths[source]
        assert hashed != source, "collectstatic wrote no hashed name"
        status, headers, body = stack.get(f"/static/{hashed}", https)
        assert status == 200, (source, status)
        assert "immutable" in headers["Cache-Control"], headers["Cache-Control"]
        assert body == (Path(stack.env["STATIC_ROOT"]) / hashed).read_bytes()
        status, headers, body = stack.get(f"/static/{hashed}", {**https, "Accept-Encoding": "gzip"})
        assert headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(body) == (Path(stack.env["STATIC_ROOT"]) / hashed).read_bytes()
    # The pages that use them render with DEBUG=0 (hashed names from the manifest).
    status, _headers, body = stack.get("/admin/login/", https)
    assert status == 200
    assert paths["admin/css/base.css"].encode() in body
    status, _headers, body = stack.get("/api/docs/", https)  # Swagger UI, from the sidecar
    assert status == 200
    assert paths["drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css"].encode() in body
    # Plain HTTP to a page is sent to HTTPS; the probes are not.
    status, headers, _body = _no_redirect(stack, "/admin/login/")
    assert status == 301
    assert headers["Location"].startswith("https://")


def _no_redirect(stack: Stack, path: str) -> tuple[int, Any, bytes]:
    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(Keep)
    try:
        with opener.open(f"http://127.0.0.1:{stack.port}{path}", timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def _connections_bounded_by_the_pool(stack: Stack) -> None:
    """40 API requests at once, each in a thread of the web process (ASGI runs every sync view
    in a thread of its own): every one answered, and the process holds at most its pool's
    PostgreSQL connections. Per-thread persistent connections kept one per request thread."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user(username="pool-probe")
    token = Token.objects.create(user=user).key
    headers = {"Authorization": f"Token {token}", "X-Forwarded-Proto": "https"}
    with ThreadPoolExecutor(max_workers=40) as pool:
        statuses = list(pool.map(lambda _: stack.get("/api/runs/", headers)[0], range(40)))
    assert statuses == [200] * 40, statuses
    held = postgres_sockets(stack.processes["web"].pid)
    assert 1 <= held <= POOL_MAX, f"the web process holds {held} PostgreSQL connections"


def postgres_sockets(pid: int, port: int = 5432) -> int:
    """Established TCP connections of process ``pid`` to ``port`` (Linux /proc: the process's
    socket inodes, looked up in the TCP tables)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            for row in f.readlines()[1:]:
                cols = row.split()
                remote_port = int(cols[2].rsplit(":", 1)[1], 16)
                if remote_port == port and cols[3] == "01" and cols[9] in inodes:
                    count += 1
    return count


def _metrics_refuse_anonymous(stack: Stack) -> None:
    status, headers, _body = stack.get("/metrics")
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Bearer")
    status, _headers, _body = stack.get("/metrics", {"Authorization": "Bearer wrong"})
    assert status == 401
    token = stack.env["AGENTCONSOLE_METRICS_TOKEN"]
    status, _headers, body = stack.get("/metrics", {"Authorization": f"Bearer {token}"})
    assert status == 200
    text = body.decode()
    assert "agentconsole_queue_depth 0.0" in text
    assert "agentconsole_step_latency_seconds_bucket" in text


def _readiness_follows_the_broker(stack: Stack, redis_server: Redis) -> None:
    redis_server.stop()
    _status, body = _wait(
        lambda: (r := stack.readyz())[0] == 503 and r, 30, "still ready with the broker stopped"
    )
    assert "broker" in body["failed"], body
    assert body["checks"]["database"]["ok"] is True

    redis_server.start()
    _wait(lambda: stack.readyz()[0] == 200, 90, "not ready again once the broker was back")


def _sigterm_leaves_nothing(stack: Stack) -> None:
    members = {name: group(p.pid) for name, p in stack.processes.items()}
    assert len(members["worker"]) >= 2, "the worker runs a pool of processes"
    for process in stack.processes.values():
        os.killpg(process.pid, signal.SIGTERM)
    for name, process in stack.processes.items():
        _wait(lambda p=process: not group(p.pid), STOP_BOUND_S, f"{name} left processes")
        assert process.wait(5) in (0, -signal.SIGTERM, 143), (name, stack.log(name))
    # Held: a worker's name on an unexpired lease (a dead process's lease lapses, its name kept
    # for the sweeper: runs.engine.leases.release_dead_local).
    held = (
        m.Run.objects.exclude(lease_owner=None)
        .exclude(lease_owner__startswith=HANDED_BACK)
        .filter(lease_expires_at__gte=timezone.now())
    )
    assert not held.exists()
    # The pool processes were not killed by the group's SIGTERM (that killed a running task at
    # once, and left the main process waiting for a pool it no longer had); the main process
    # stopped them.
    assert "exited with 'signal 15" not in stack.log("worker"), stack.log("worker")
    # The worker removed its heartbeat: readiness cannot count a worker that is gone.
    assert redis.Redis.from_url(stack.env["REDIS_URL"]).zcard(heartbeat.REDIS_KEY) == 0
