"""What the live benchmarks share: child processes in their own process groups (daphne, Celery
workers), a private broker, Redis cleanup, users, benchmark runs, log counting.

Every process started here is stopped in a ``finally`` (its process group killed on timeout);
Redis keys naming our queues are deleted."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from bench.support.harness import ROOT, Context, summary

SCENARIOS = ROOT / "runs" / "fixtures" / "scenarios"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20
SHARE_S = 120.0  # each benchmark here stops by itself within about this much
CONNECT_AT_ONCE, CONNECT_ATTEMPTS = 10, 3
DRAIN_S = 30.0  # how long the trace benchmark waits for clients to receive every event
WORKER_OVERHEAD_S = 30.0  # starting and stopping the workers of one configuration

QUERIES = [
    "retries exhausted quarantine",
    "confirmation proposal hash",
    "artifact sha-256 hash",
    "operator approves arguments",
    "idempotency token retry",
    "quarantine queue on-call operator",
    "compensation-required reviewer",
    "preferences saved after confirm",
]


def _budget(ctx: Context, share: float = SHARE_S) -> float:
    """Seconds this benchmark may use: its share, or less when the overall deadline is near."""
    return max(10.0, min(share, ctx.time_left() - 10.0))


def _bin(name: str) -> str:
    venv = ROOT / ".venv" / "bin" / name
    return str(venv if venv.exists() else Path(sys.executable).with_name(name))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(ctx: Context, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = ctx.database_url
    if ctx.redis_url:
        env["REDIS_URL"] = ctx.redis_url
    else:
        env.pop("REDIS_URL", None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "agentconsole.settings",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "WARNING",
            **extra,
        }
    )
    return env


def _layer(ctx: Context) -> str:
    return "Redis channel layer" if ctx.redis_url else "in-memory channel layer"


def _broker(ctx: Context) -> str:
    return "Redis broker" if ctx.redis_url else "filesystem broker (private folder)"


class _Proc:
    """A child process in its own process group, its output in a temporary log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        fd, path = tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log")
        self.name = name
        self.log = Path(path)
        try:
            self.popen = subprocess.Popen(  # noqa: S603 — fixed argv: our venv's tools
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(fd)

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        try:
            _stop_group(self.popen)
        finally:
            self.log.unlink(missing_ok=True)


def _stop_group(popen: subprocess.Popen[Any]) -> None:
    """SIGTERM the group (Celery: warm shutdown), SIGKILL the group if it does not exit."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        # Leftovers of the group (prefork children) go too, also after the leader exited.
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=10)


def _start_daphne(stack: contextlib.ExitStack, env: dict[str, str]) -> int:
    port = _free_port()
    argv = [_bin("daphne"), "-b", "127.0.0.1", "-p", str(port), "agentconsole.asgi:application"]
    proc = _Proc("daphne", argv, env)
    stack.callback(proc.stop)
    deadline = time.monotonic() + START_TIMEOUT_S
    url = f"http://127.0.0.1:{port}/healthz"
    while True:
        if not proc.alive():
            raise RuntimeError(f"daphne exited:\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return port
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"daphne did not answer /healthz:\n{proc.tail()}")
        time.sleep(0.2)


def _start_workers(
    stack: contextlib.ExitStack, env: dict[str, str], queues: str, names: list[str]
) -> list[_Proc]:
    procs = []
    for name in names:
        argv = [
            _bin("celery"), "-A", "agentconsole", "worker", "--pool", "prefork", "-c", "1",
            "-l", "info", "-Q", queues, "-n", f"{name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        proc = _Proc("worker", argv, env)
        stack.callback(proc.stop)
        procs.append(proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    for proc in procs:
        # "<name>@<host> ready." is logged at INFO once the consumer listens.
        while " ready." not in proc.text():
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not become ready:\n{proc.tail()}")
            time.sleep(0.1)
    return procs


@contextlib.contextmanager
def _private_broker(ctx: Context) -> Iterator[dict[str, str]]:
    """Yield extra environment for workers (and daphne) so that they share a broker with this
    process and nobody else: with Redis, the Redis of ``ctx`` (queues named per benchmark); with
    the filesystem transport, a fresh folder, to which this process's producer is pointed too."""
    if ctx.redis_url:
        yield {}
        return
    from agentconsole.celery import app

    folder = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "polling_interval": 0.05,
    }
    for sub in ("queue", "processed", "control"):
        (folder / sub).mkdir()

    def reset() -> None:
        # Celery caches the connection pool and producer pool on first use and has no public
        # way to drop them (app.close() also deregisters the app); celery-types does not
        # declare these private attributes.
        pool = app._pool  # type: ignore[attr-defined]
        if pool is not None:
            pool.force_close_all()
        app._pool = None  # type: ignore[attr-defined]
        app.amqp._producer_pool = None  # type: ignore[attr-defined]

    saved = app.conf.broker_transport_options
    app.conf.broker_transport_options = options
    reset()
    try:
        yield {"AGENTCONSOLE_BROKER_DIR": str(folder)}
    finally:
        app.conf.broker_transport_options = saved
        reset()
        shutil.rmtree(folder, ignore_errors=True)


def forget_queue(url: str, tag: str) -> None:
    """Delete a private queue's keys and kombu bindings from a Redis broker (benchmarks and tests
    give each worker a queue named after ``tag``; nothing of theirs may outlive them)."""
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
            exchange = _bytes(exchange)
            if not client.exists(b"_kombu.binding." + exchange):
                client.zrem("_kombu.binding_deadlines", exchange)
        # Messages a killed worker had taken but not acknowledged (acks_late): kombu would put
        # them back on our queue after its visibility timeout, recreating it an hour later.
        for delivery, message in client.hscan_iter("unacked"):
            if tag.encode() in message:
                client.hdel("unacked", delivery)
                client.zrem("unacked_index", delivery)
    finally:
        client.close()


def _bytes(reply: object) -> bytes:
    """A reply of a client without decode_responses: redis-py types it for either setting."""
    if not isinstance(reply, bytes):
        raise TypeError(f"a Redis reply of type {type(reply).__name__}, not bytes")
    return reply


def _redis_cleanup(ctx: Context, tag: str, run_ids: Collection[str] = ()) -> None:
    """Delete the Redis keys and bindings naming ``tag`` (our queues, our workers' pidbox
    bindings); drop from the shared default queue any message still naming one of our runs; drop
    the channel-layer groups of our runs (a consumer still connected when daphne stopped never
    discarded itself)."""
    if not ctx.redis_url:
        return
    import redis
    from django.conf import settings

    from runs.engine.doorbell import run_group

    layer = redis.Redis.from_url(ctx.redis_url)
    try:
        prefix = settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix", "asgi")
        for run_id in run_ids:
            layer.delete(f"{prefix}:group:{run_group(run_id)}")
    finally:
        layer.close()
    forget_queue(settings.CELERY_BROKER_URL, tag)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        if run_ids and client.type("celery") == b"list":
            for reply in client.lrange("celery", 0, -1):
                message = _bytes(reply)
                text = message.decode("utf-8", "replace")
                if any(r in text for r in run_ids):
                    # redis-py types lrem's value as str; it sends bytes as they are (the
                    # exact message, which a decode with "replace" might not give back).
                    client.lrem("celery", 0, message)  # type: ignore[arg-type]
    finally:
        client.close()


def _user(name: str, role: str) -> tuple[Any, str]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user(username=name)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user, Token.objects.create(user=user).key


def _load_corpus() -> int:
    from runs.tools.corpus import demo_corpus_dir, document_load

    files = sorted(demo_corpus_dir().glob("*.md"))
    for path in files:
        document_load(path=path)
    return len(files)


def _search_run(*, subject: str, owner: Any, searches: int, tag: str) -> Any:
    """A run of ``searches`` search_public steps over the demo corpus, then a final answer
    citing tool-1: ``searches + 1`` planner steps."""
    from runs import services
    from runs.domain.budgets import RunBudgets
    from runs.start.limits import RunLimits

    outputs: list[dict[str, Any]] = [
        {
            "kind": "tool",
            "proposal_id": f"p{i + 1}",
            "tool_name": "search_public",
            "tool_version": "1",
            # Distinct arguments per step: the loop guard sees a new proposal every time.
            "arguments": {"query": f"{QUERIES[i % len(QUERIES)]} q{i}", "limit": 3},
            "reason_summary": "benchmark search",
            "source_observation_ids": ["user-1"],
        }
        for i in range(searches)
    ]
    outputs.append(
        {"kind": "final", "answer": f"benchmark {tag}", "citation_observation_ids": ["tool-1"]}
    )
    return services.run_create(
        subject=subject,
        goal=f"benchmark {tag}: what happens after retries are exhausted?",
        budgets=RunBudgets(
            max_steps=searches + 2,
            max_tool_calls=searches + 1,
            max_repeated_proposal=2,
            deadline_ms=3_600_000,
        ),
        grants=[
            {
                "capability": "search:public",
                "resource_scope": "public",
                "expires_at_step": searches + 5,
            }
        ],
        planner={"kind": "fixture", "outputs": outputs},
        owner=owner,
        granted_by=owner,
        # A load test starts hundreds of runs of one subject: not what the limits are for.
        limits=RunLimits.off(),
    )


class _LogCounter(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _counting(
    logger_name: str, level: int = logging.WARNING, *, quiet: bool = False
) -> Iterator[_LogCounter]:
    """Collect a logger's records; ``quiet``: only here, not on the console too."""
    handler = _LogCounter(level)
    logger = logging.getLogger(logger_name)
    saved = logger.propagate
    logger.addHandler(handler)
    if quiet:
        logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


def _ms(values: list[float]) -> dict[str, float]:
    return {k: (round(v, 2) if k != "n" else v) for k, v in summary(values).items()}


def _time_get(
    client: Any, path: str, warm: int, reps: int, hint: str = ""
) -> tuple[list[float], list[dict[str, Any]], Any]:
    """``warm`` untimed GETs of ``path`` (each must answer 200; ``hint`` says why one may not),
    ``reps`` timed ones, then one with its queries captured: (times in ms, its queries, its
    response)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(warm):
        response = client.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {hint or response.content!r}")
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    return times, captured.captured_queries, response
