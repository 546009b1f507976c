"""Every write of a call made outside a run's commit (a model call, or a tool call: ``kind``),
and the reads around them.

Called by the gateway (in its database threads), the sweeper and the metrics. Each write is a
compare-and-set on the call's status (and, while it is being sent, on its lease), so a gateway
that lost its lease, or a call the run abandoned meanwhile, changes nothing: the statement
matches no row and the answer is dropped.

The per-endpoint limit is counted in the database (calls ``sending`` under a live lease), so it
holds over every gateway process. On PostgreSQL one claim per endpoint at a time takes a
transaction-scoped advisory lock, so two gateways cannot both see the same free slots. SQLite
(the embedded deployment, one gateway) has no such lock; its single writer makes the claim's
count and update serial anyway.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, F, Q, Value, Window
from django.db.models.functions import Coalesce, RowNumber

from agentconsole.kernel import sqlbatch
from runs.calls.models import CallAttempt, ModelCall
from runs.domain.gateway.calls import OPEN, CallKind, CallStatus

SENDING = CallStatus.SENDING.value
QUEUED = CallStatus.QUEUED.value
MODEL = CallKind.MODEL.value
TOOL = CallKind.TOOL.value


@dataclass(frozen=True)
class Claimed:
    """A call this gateway now sends: attempt ``attempt`` (counted from one, lost ones too).
    ``sent``: a tool call whose ``tools/call`` already went out in an earlier attempt."""

    call_id: str
    run_id: str
    endpoint: str
    body: dict[str, Any]
    deadline_ms: int
    attempt: int
    kind: str = MODEL
    subject: str = ""
    sent: bool = False


@dataclass(frozen=True)
class Result:
    """How one attempt ended. ``kind``: ``answered`` (``reply`` recorded), ``failed`` (no retry
    left: ``failure`` recorded), ``retry`` (queued again, not before ``not_before``) or
    ``abandoned`` (the run let go of the call; only the attempt is recorded)."""

    call_id: str
    attempt: int
    kind: str
    outcome: str
    reply: Any = None
    failure: dict[str, Any] | None = None
    not_before: datetime | None = None
    http_status: int | None = None
    latency_ms: int | None = None


def _due_any(now: datetime) -> Any:
    # Queued and due, or being sent by a gateway whose lease lapsed (it died or hangs).
    return ModelCall.objects.filter(
        Q(status=QUEUED, not_before__lte=now) | Q(status=SENDING, lease_expires_at__lt=now)
    )


def _due(kind: str, now: datetime) -> Any:
    return _due_any(now).filter(kind=kind)


def due_lanes(*, now: datetime) -> set[tuple[str, str]]:
    """The lanes with calls due, as (kind, lane): the model endpoints and MCP servers a claim
    round claims for, in one read (a round with nothing due ends with it)."""
    return set(_due_any(now).values_list("kind", "endpoint").distinct()[:1000])


def in_flight(endpoint: str, now: datetime, kind: str = MODEL) -> int:
    return ModelCall.objects.filter(
        kind=kind, endpoint=endpoint, status=SENDING, lease_expires_at__gte=now
    ).count()


def claim(
    *,
    kind: str = MODEL,
    endpoint: str,
    limit: int,
    owner: str,
    now: datetime,
    lease: timedelta,
    batch: int,
) -> list[Claimed]:
    """Take up to ``batch`` due calls of ``kind`` in the lane ``endpoint`` (a model endpoint,
    an MCP server), within its limit of calls in flight.

    1. Lock the endpoint's claims (PostgreSQL: an advisory lock for this transaction).
    2. Free slots = ``limit`` - calls being sent under a live lease.
    3. Pick that many due calls, subjects in turn: each subject's oldest call first, then each
       one's second oldest, ... (one subject's 1,000 calls do not starve another's 3).
    4. Mark them ``sending`` under this gateway's lease, one attempt more (one UPDATE, matched
       again by a mark of its own so a call that moved meanwhile is left out), record each
       attempt, and close the attempt a dead gateway left open as lost.

    A gateway never claims a call under its own lease again, even one whose lease lapsed (a
    renewal late under load): it is still sending it, and the answer on its way is that
    attempt's. (A restarted gateway is another owner: ``runs.engine.leases.new_owner``.)
    """
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"agentconsole.calls:{endpoint}"]
                )
        free = min(batch, limit - in_flight(endpoint, now, kind))
        if free <= 0:
            return []
        turn = Window(RowNumber(), partition_by=[F("subject")], order_by=[F("created_at"), F("id")])
        picked = list(
            _due(kind, now)
            .filter(endpoint=endpoint)
            .exclude(lease_owner=owner)
            .annotate(turn=turn)
            .order_by("turn", "created_at", "id")
            .values_list("id", "status")[:free]
        )
        if not picked:
            return []
        ids = [pk for pk, _ in picked]
        lapsed = [pk for pk, status in picked if status == SENDING]
        mark = f"{owner}#{uuid.uuid4().hex[:8]}"
        until = now + lease
        # The race: a run's stop abandons a call between the pick and this UPDATE; the status
        # condition leaves it out, and the mark tells which rows this UPDATE took.
        _due(kind, now).filter(endpoint=endpoint, id__in=ids).update(
            status=SENDING, lease_owner=mark, lease_expires_at=until, attempts=F("attempts") + 1
        )
        rows = list(
            ModelCall.objects.filter(id__in=ids, lease_owner=mark).values_list(
                "id", "run_id", "request", "deadline_ms", "attempts", "subject", "sent_at"
            )
        )
        ModelCall.objects.filter(id__in=[r[0] for r in rows]).update(lease_owner=owner)
        if lapsed:
            CallAttempt.objects.filter(call_id__in=lapsed, finished_at__isnull=True).update(
                finished_at=now, outcome="lost"
            )
        CallAttempt.objects.bulk_create(
            [CallAttempt(call_id=r[0], attempt=r[4], owner=owner, started_at=now) for r in rows]
        )
    return [
        Claimed(pk, run_id, endpoint, body, deadline_ms, attempts, kind, subject, sent is not None)
        for pk, run_id, body, deadline_ms, attempts, subject, sent in rows
    ]


def mark_sent(*, owner: str, call_id: str, attempt: int, now: datetime) -> bool:
    """Record that a tool call's request goes out now, before it does; False if the call is no
    longer this attempt's (the run let go of it, or another gateway took it): not sent.

    The race: a run's stop abandons the call while the gateway is about to send. Both write
    the call's row, so they serialize: the abandon first, and this matches no row (not sent);
    this first, and the run's step sees the call as sent (its effect may exist)."""
    return (
        ModelCall.objects.filter(
            id=call_id, status=SENDING, lease_owner=owner, attempts=attempt
        ).update(sent_at=Coalesce(F("sent_at"), Value(now)))
        == 1
    )


def settle(results: Sequence[Result], *, owner: str, now: datetime) -> list[str]:
    """Record how attempts ended, in one transaction; the run ids now owed a worker (their call
    answered or failed for good). Recorded before anything acts on it: the caller sends the
    runs on only after this returns."""
    writes: list[sqlbatch.Write] = []
    settling: list[tuple[int, Result]] = []  # (index of the call's write, result)
    for r in results:
        if r.kind != "abandoned":  # an abandoned call already left ``sending``
            settling.append((len(writes), r))
            writes.append(_call_write(r, owner, now))
        writes.append(
            sqlbatch.update(
                CallAttempt,
                {
                    "finished_at": now,
                    "outcome": r.outcome[:64],
                    "http_status": r.http_status,
                    "latency_ms": r.latency_ms,
                },
                {"call": r.call_id, "attempt": r.attempt},
            )
        )
    with transaction.atomic():
        ran = sqlbatch.run(writes)
        if ran.error is not None:
            raise ran.error
    owed = [
        r.call_id for i, r in settling if ran.rowcounts[i] == 1 and r.kind in ("answered", "failed")
    ]
    if not owed:
        return []
    return list(ModelCall.objects.filter(id__in=owed).values_list("run_id", flat=True))


def _call_write(r: Result, owner: str, now: datetime) -> sqlbatch.Write:
    # Only while the call is still ours: sending, under our lease, at this attempt. A call the
    # run abandoned, or that another gateway claimed after our lease lapsed, is not touched.
    where = {"id": r.call_id, "status": SENDING, "lease_owner": owner, "attempts": r.attempt}
    if r.kind == "answered":
        values: dict[str, Any] = {
            "status": CallStatus.ANSWERED.value,
            "reply": r.reply,
            "answered_at": now,
        }
    elif r.kind == "failed":
        values = {"status": CallStatus.FAILED.value, "failure": r.failure, "answered_at": now}
    else:  # retry: queued again, not before the backoff or the endpoint's Retry-After
        values = {"status": QUEUED, "not_before": r.not_before or now}
    values.update(lease_owner=None, lease_expires_at=None)
    return sqlbatch.update(ModelCall, values, where)


def renew(*, owner: str, ids: Sequence[str], now: datetime, lease: timedelta) -> set[str]:
    """Extend this gateway's lease on the calls it is sending; the ids it still holds (the
    others were abandoned by their runs, or taken over after a lapse: stop sending them)."""
    if not ids:
        return set()
    mine = ModelCall.objects.filter(id__in=list(ids), status=SENDING, lease_owner=owner)
    mine.update(lease_expires_at=now + lease)
    return set(mine.values_list("id", flat=True))


def release(*, owner: str, ids: Sequence[str]) -> int:
    """Give calls back to the queue (a gateway stopping with calls still in flight): another
    gateway sends them at once instead of after the lease lapses. Their attempt stays open and
    is closed as lost by the next claim."""
    if not ids:
        return 0
    return ModelCall.objects.filter(id__in=list(ids), status=SENDING, lease_owner=owner).update(
        status=QUEUED, lease_owner=None, lease_expires_at=None
    )


def fail_unknown_endpoints(*, known: Iterable[str], now: datetime) -> list[str]:
    """Calls due for an endpoint no longer configured fail with PLANNER_ENDPOINT_UNKNOWN (the
    code a run gets when its endpoint is removed before its step); their run ids."""
    stray = ModelCall.objects.filter(kind=MODEL, status=QUEUED, not_before__lte=now).exclude(
        endpoint__in=list(known)
    )
    ids = list(stray.values_list("id", flat=True)[:500])
    if not ids:
        return []
    failure = {"code": "PLANNER_ENDPOINT_UNKNOWN", "status": None}
    ModelCall.objects.filter(id__in=ids, status=QUEUED).update(
        status=CallStatus.FAILED.value, failure=failure, answered_at=now
    )
    return list(
        ModelCall.objects.filter(id__in=ids, status=CallStatus.FAILED.value).values_list(
            "run_id", flat=True
        )
    )


def counts_by_endpoint() -> dict[str, dict[tuple[str, str], int]]:
    """Open calls by kind, then by (lane, status): the metrics' calls in flight and queued
    (one query for model endpoints and MCP servers alike)."""
    rows = (
        ModelCall.objects.filter(status__in=[s.value for s in OPEN])
        .values_list("kind", "endpoint", "status")
        .annotate(n=Count("id"))
    )
    out: dict[str, dict[tuple[str, str], int]] = {MODEL: {}, TOOL: {}}
    for kind, endpoint, status, n in rows:
        out.setdefault(kind, {})[(endpoint, status)] = n
    return out
