"""Prometheus metrics at ``/metrics`` (access-controlled), computed at scrape time.

Web and worker processes run on different hosts, so nothing is counted in one process's memory
where the database already knows it. Per scrape (whichever web process Prometheus reaches):

- 5 SQL queries (PostgreSQL is the truth): runs by status; pending confirmations with the
  oldest one's age; unresolved handoffs by status; tool calls by tool and ledger status; open
  model calls by endpoint and status (the gateway's in flight and queued).
  Each is one aggregate (GROUP BY or COUNT/MIN) returning a handful of rows; the first and the
  last scan their tables, which is fine for millions of rows at a scrape every 15-60 s.
- 1 broker round trip: the depth of the run queue (a Redis LLEN; a folder count embedded).
- 1 Redis round trip (with ``REDIS_URL``): the step latency histogram and the lease takeover
  counter, which workers on every host add to (``HINCRBY``/``HINCRBYFLOAT`` on one hash).
- The websocket clients of *this* web process (a gauge per process: scrape every web process,
  or sum them over the instances).

Step latency is observed by the worker's run store (``StepTimingStore``): the wall time from
one planner step's commit to the next one's within one advance, i.e. plan, gate, tool and
settle of a step. Without Redis (the embedded deployment) the histogram and the counter stay
empty.
"""

from __future__ import annotations

import hmac
import logging
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from rest_framework.exceptions import AuthenticationFailed

from agentconsole.access.auth import ExpiringTokenAuthentication
from agentconsole.celery import app as celery_app
from agentconsole.kernel.roles import is_operator
from policy import confirmation_selectors
from runs import selectors as run_selectors
from runs.calls import records as calls_records
from runs.domain.state import RunState
from runs.engine.leases import lease_taken_over
from runs.orm.store import OrmRunStore
from runs.web import socket_guard

log = logging.getLogger(__name__)

REDIS_KEY = "agentconsole:metrics"
# Seconds; a step is a planner call plus, usually, one tool call.
STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_INF = "+Inf"


def _redis() -> redis.Redis | None:
    if not settings.REDIS_URL:
        return None
    timeout = settings.AGENTCONSOLE_READY_TIMEOUT_S
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout
    )


_client: redis.Redis | None = None


def shared() -> redis.Redis | None:
    """One client per process (it pools its connections)."""
    global _client  # a per-process connection pool
    if _client is None:
        _client = _redis()
    return _client


# --- What workers add (any host) ----------------------------------------------------------


def observe_step_latency(seconds: float) -> None:
    client = shared()
    if client is None:
        return
    bucket = next((str(b) for b in STEP_BUCKETS if seconds <= b), _INF)
    try:
        with client.pipeline(transaction=False) as pipe:
            pipe.hincrby(REDIS_KEY, f"step_bucket:{bucket}", 1)
            pipe.hincrbyfloat(REDIS_KEY, "step_sum", seconds)
            pipe.execute()
    except redis.RedisError as exc:  # a lost sample, never a failed step
        log.debug("step latency not recorded: %s", exc.__class__.__name__)


# Seconds; one attempt of one model call (a completion of a few hundred tokens takes 1-10 s).
MODEL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def observe_model_latency(samples: Sequence[tuple[str, str, float]]) -> None:
    """The gateway's attempts, (kind, lane, seconds) each, added in one round trip: a model
    call's lane is its endpoint, an MCP tool call's ``mcp:<server>``."""
    client = shared()
    if client is None or not samples:
        return
    try:
        with client.pipeline(transaction=False) as pipe:
            for kind, lane, seconds in samples:
                prefix, name = (
                    ("mcp", lane.removeprefix("mcp:")) if kind == "tool" else ("model", lane)
                )
                bucket = next((str(b) for b in MODEL_BUCKETS if seconds <= b), _INF)
                pipe.hincrby(REDIS_KEY, f"{prefix}_bucket:{name}:{bucket}", 1)
                pipe.hincrbyfloat(REDIS_KEY, f"{prefix}_sum:{name}", seconds)
            pipe.execute()
    except redis.RedisError as exc:  # lost samples, never a failed call
        log.debug("call latency not recorded: %s", exc.__class__.__name__)


def on_lease_taken_over(sender: Any = None, run_ids: list[str] | None = None, **_: Any) -> None:
    client = shared()
    if client is None or not run_ids:
        return
    try:
        client.hincrby(REDIS_KEY, "lease_takeovers", len(run_ids))
    except redis.RedisError as exc:
        log.debug("lease takeover not counted: %s", exc.__class__.__name__)


lease_taken_over.connect(on_lease_taken_over, dispatch_uid="agentconsole-metrics-takeovers")


class StepTimingStore(OrmRunStore):
    """The worker's run store, timing each planner step (between two step commits)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._marks: dict[str, tuple[int, float]] = {}  # run id -> (step, when it began)

    def load(self, run_id: str, *, inputs: bool = False) -> RunState:
        state = super().load(run_id, inputs=inputs)
        # The first load of an advance starts the clock of its first step.
        self._marks.setdefault(run_id, (state.step, time.monotonic()))
        return state

    def apply(self, commit: Any, *, decided_by: Any = None) -> RunState:
        state = super().apply(commit, decided_by=decided_by)
        mark = self._marks.get(state.run_id)
        if mark is not None and state.step > mark[0]:
            now = time.monotonic()
            observe_step_latency(now - mark[1])
            self._marks[state.run_id] = (state.step, now)
        return state


# --- What a scrape reads --------------------------------------------------------------------


def queue_depth() -> int:
    """Messages waiting in the run queue (the default queue) at the broker."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    timeout = settings.AGENTCONSOLE_READY_TIMEOUT_S
    with celery_app.connection_for_read() as conn:
        conn.ensure_connection(
            max_retries=1, interval_start=0, interval_step=0, timeout=math.ceil(timeout)
        )
        channel: Any = conn.default_channel
        try:
            _name, count, _consumers = channel.queue_declare(queue=queue, passive=True)
        except conn.channel_errors:  # not declared yet: no worker ever started, nothing queued
            return 0
        return int(count)


class StateCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from self._runs()
        yield from self._confirmations()
        yield from self._handoffs()
        yield from self._tools()
        yield from self._queue()
        yield from self._model_calls()
        yield from self._shared()
        clients = GaugeMetricFamily(
            "agentconsole_websocket_clients",
            "Open websockets of this web process, by kind.",
            labels=["kind"],
        )
        for kind, n in sorted(socket_guard.open_clients().items()):
            clients.add_metric([kind], n)
        yield clients

    def _runs(self) -> Iterator[Metric]:
        runs = GaugeMetricFamily("agentconsole_runs", "Runs by status.", labels=["status"])
        for status, n in run_selectors.runs_by_status().items():
            runs.add_metric([status], n)
        yield runs

    def _confirmations(self) -> Iterator[Metric]:
        pending = confirmation_selectors.pending_confirmations_summary()
        yield GaugeMetricFamily(
            "agentconsole_pending_confirmations",
            "Confirmations waiting for a person.",
            value=pending.count,
        )
        oldest = pending.oldest_requested_at
        age = (timezone.now() - oldest).total_seconds() if oldest else 0.0
        yield GaugeMetricFamily(
            "agentconsole_oldest_pending_confirmation_age_seconds",
            "Age of the oldest pending confirmation (0 when none).",
            value=age,
        )

    def _handoffs(self) -> Iterator[Metric]:
        handoffs = GaugeMetricFamily(
            "agentconsole_open_handoffs", "Unresolved handoffs, by status.", labels=["status"]
        )
        counts = run_selectors.unresolved_handoffs_by_status()
        for status, n in sorted(counts.items()):
            handoffs.add_metric([status], n)
        yield handoffs

    def _tools(self) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            "agentconsole_tool_calls",
            "Tool calls by tool and ledger status (started = not settled yet).",
            labels=["tool", "status"],
        )
        for (tool, status), n in run_selectors.tool_calls_by_status().items():
            calls.add_metric([tool, status], n)
        yield calls

    def _queue(self) -> Iterator[Metric]:
        try:
            depth: float = queue_depth()
        except Exception as exc:  # the broker away: say so with NaN, keep the other metrics
            log.warning("queue depth unavailable: %s", exc.__class__.__name__)
            depth = float("nan")
        yield GaugeMetricFamily(
            "agentconsole_queue_depth", "Messages waiting in the run queue.", value=depth
        )

    def _model_calls(self) -> Iterator[Metric]:
        by_kind = calls_records.counts_by_endpoint()
        counts = by_kind[calls_records.MODEL]
        names = sorted(
            {endpoint for endpoint, _ in counts} | set(settings.AGENTCONSOLE_MODEL_ENDPOINTS)
        )
        for status, name, text in (
            ("sending", "in_flight", "Model calls being sent now, by endpoint."),
            ("queued", "queued", "Model calls waiting for a slot or a retry, by endpoint."),
        ):
            family = GaugeMetricFamily(
                f"agentconsole_model_calls_{name}", text, labels=["endpoint"]
            )
            for endpoint in names:
                family.add_metric([endpoint], counts.get((endpoint, status), 0))
            yield family
        # The MCP tool calls runs wait on in the gateway, by server (lane ``mcp:<server>``).
        tools = by_kind[calls_records.TOOL]
        servers = sorted({lane for lane, _ in tools})
        for status, name, text in (
            ("sending", "in_flight", "MCP tool calls the gateway is making now, by server."),
            ("queued", "queued", "MCP tool calls waiting for a slot or a retry, by server."),
        ):
            family = GaugeMetricFamily(f"agentconsole_mcp_calls_{name}", text, labels=["server"])
            for lane in servers:
                family.add_metric([lane.removeprefix("mcp:")], tools.get((lane, status), 0))
            yield family

    def _shared(self) -> Iterator[Metric]:
        values: dict[bytes, bytes] = {}
        client = shared()
        if client is not None:
            try:
                values = client.hgetall(REDIS_KEY)  # type: ignore[assignment]
            except redis.RedisError as exc:
                log.warning("shared metrics unavailable: %s", exc.__class__.__name__)
        fields = {k.decode(): v.decode() for k, v in values.items()}
        yield CounterMetricFamily(
            "agentconsole_lease_takeovers",
            "Runs taken from a worker that stopped renewing their lease (died or hung).",
            value=int(fields.get("lease_takeovers", 0)),
        )
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound in [*map(str, STEP_BUCKETS), _INF]:
            cumulative += int(fields.get(f"step_bucket:{bound}", 0))
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "agentconsole_step_latency_seconds",
            "Wall time of one planner step in a worker (plan, gate, tool, settle).",
            buckets=buckets,
            sum_value=float(fields.get("step_sum", 0.0)),
        )
        yield _call_histogram(
            fields, "model", "endpoint", "Wall time of one attempt of a model call in the gateway."
        )
        yield _call_histogram(
            fields, "mcp", "server", "Wall time of one MCP tool call made by the gateway."
        )


def _call_histogram(fields: dict[str, str], prefix: str, label: str, text: str) -> Metric:
    """A histogram of the gateway's call attempts, one series per ``label`` value."""
    family = HistogramMetricFamily(
        f"agentconsole_{prefix}_call_latency_seconds", text, labels=[label]
    )
    names = sorted(k.split(":", 1)[1] for k in fields if k.startswith(f"{prefix}_sum:"))
    for name in names:
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound in [*map(str, MODEL_BUCKETS), _INF]:
            cumulative += int(fields.get(f"{prefix}_bucket:{name}:{bound}", 0))
            buckets.append((bound, cumulative))
        family.add_metric([name], buckets, float(fields.get(f"{prefix}_sum:{name}", 0.0)))
    return family


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(StateCollector())


def _allowed(request: HttpRequest) -> int:
    """200 if the caller may scrape, else 401 (who are you?) or 403 (not you)."""
    header = request.headers.get("Authorization", "")
    token = settings.AGENTCONSOLE_METRICS_TOKEN
    if token and header.startswith("Bearer "):
        given = header.removeprefix("Bearer ").strip()
        return 200 if hmac.compare_digest(given.encode(), token.encode()) else 401
    user: Any = request.user
    if header.startswith("Token "):
        try:
            found = ExpiringTokenAuthentication().authenticate(request)  # type: ignore[arg-type]
        except AuthenticationFailed:
            return 401
        user = found[0] if found else None
    if user is None or not user.is_authenticated:
        return 401
    return 200 if is_operator(user) else 403  # operators and admins


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    status = _allowed(request)
    if status != 200:
        response = HttpResponse(
            "metrics need an operator's session or token, or the metrics bearer token\n",
            status=status,
            content_type="text/plain",
        )
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
