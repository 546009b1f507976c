"""Readiness: may this web process take traffic? ``/readyz`` (liveness is ``/healthz``).

Four checks, each bounded by ``AGENTCONSOLE_READY_TIMEOUT_S``: the database answers, the broker
answers (the run queue's depth is read), the channel layer answers (a Redis PING; the in-memory
layer of the embedded deployment always does), and some worker's heartbeat is younger than
``AGENTCONSOLE_READY_HEARTBEAT_MAX_AGE_S`` (agentconsole/ops/heartbeat.py): without a worker, runs
would be accepted and never advance. The body names each check and, for a failed one, the kind
of error (an exception class name: never a URL, a host or a password). Unauthenticated, like
any probe: it reveals nothing but which dependency is down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from agentconsole.ops import heartbeat
from agentconsole.ops.metrics import queue_depth


def check_database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {}


def check_broker() -> dict[str, Any]:
    return {"queue_depth": queue_depth()}


async def _ping_layer() -> None:
    layer: Any = get_channel_layer()
    if hasattr(layer, "connection"):  # channels_redis: one PING on its first shard
        await layer.connection(0).ping()


def check_channel_layer() -> dict[str, Any]:
    async_to_sync(_ping_layer)()
    return {}


def check_worker_heartbeat() -> dict[str, Any]:
    newest = heartbeat.store(timeout_s=settings.AGENTCONSOLE_READY_TIMEOUT_S).newest()
    if newest is None:
        raise LookupError("no worker heartbeat")
    age = round(max(0.0, time.time() - newest), 3)
    if age > settings.AGENTCONSOLE_READY_HEARTBEAT_MAX_AGE_S:
        raise TimeoutError(f"newest worker heartbeat is {age} s old")
    return {"age_s": age}


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "database": check_database,
    "broker": check_broker,
    "channel_layer": check_channel_layer,
    "worker_heartbeat": check_worker_heartbeat,
}


def readiness() -> tuple[bool, dict[str, dict[str, Any]]]:
    results: dict[str, dict[str, Any]] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = {"ok": True, **check()}
        except Exception as exc:  # any failure of a dependency is "not ready", never a 500
            error: dict[str, Any] = {"ok": False, "error": exc.__class__.__name__}
            if isinstance(exc, LookupError | TimeoutError) and name == "worker_heartbeat":
                error["detail"] = str(exc)
            results[name] = error
    return all(r["ok"] for r in results.values()), results


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    ready, checks = readiness()
    failed = sorted(name for name, r in checks.items() if not r["ok"])
    body = {"status": "ready" if ready else "unready", "failed": failed, "checks": checks}
    return JsonResponse(body, status=200 if ready else 503)
