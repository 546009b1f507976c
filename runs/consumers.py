"""Live trace and console websockets (SPEC §7). Thin: authenticate, object-check, then relay
what the database says.

/ws/runs/<run_id>/trace/?after=<sequence>
    1. replays every event after ``after`` from the database, in order;
    2. sends ``{"type": "replayed", "last_sequence": n}``;
    3. streams later events as they commit. A doorbell (after commit) triggers a read of
       everything after the last sent sequence; a periodic catch-up does the same, so a missed
       doorbell — or the in-memory layer across processes — never loses an event. One lock
       serialises the reads and ``last`` only moves forward: no gap, no duplicate, also across
       reconnects (the client reconnects with ``after`` = the last sequence it saw).

/ws/console/ pushes ``{"type": "queues", "pending_confirmations", "open_handoffs"}`` to
operators, reviewers and admins whenever they change.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from policy.domain.errors import NotFound
from policy.roles import is_operator, is_reviewer
from runs import models as m
from runs import selectors
from runs.doorbell import CONSOLE_GROUP, run_group

# The periodic read that covers a lost doorbell. With the in-memory layer (embedded) a
# worker's ring never reaches the web process, so it is the delivery path: keep it short.
# With Redis the doorbell is the path and this is only a safety net.
CATCH_UP_S = 1.0 if not os.environ.get("REDIS_URL") else 5.0
BATCH = 200
# Close codes (4000-4999 are the application's): the same vocabulary as the HTTP API.
NOT_AUTHENTICATED, NOT_FOUND, BAD_REQUEST, PERMISSION_DENIED = 4401, 4404, 4400, 4403

# Accepted sockets of this web process, by kind (the /metrics gauge; agentconsole/metrics.py).
# One event loop per daphne process runs every consumer, so plain integers need no lock.
_open_clients = {"trace": 0, "console": 0}


def open_clients() -> dict[str, int]:
    return dict(_open_clients)


def _after(scope: dict[str, Any]) -> int | None:
    raw = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after", ["0"])[-1]
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if 0 <= value < 2**31 else None


@database_sync_to_async
def _visible(user: Any, run_id: str) -> bool:
    try:
        selectors.access_run(user=user, run_id=run_id)
    except NotFound:
        return False
    return True


@database_sync_to_async
def _events_after(run_id: str, after: int) -> list[dict[str, Any]]:
    rows = m.TraceEvent.objects.filter(run_id=run_id, sequence__gt=after).order_by("sequence")
    return [
        {
            "type": "event",
            "sequence": r.sequence,
            "event": r.event,
            "proposal_id": r.proposal_id,
            "details": r.details,
            "created_at": r.created_at.isoformat(),
        }
        for r in rows[:BATCH]
    ]


def _uncount(consumer: Any) -> None:
    kind = getattr(consumer, "counted", None)
    if kind is not None:  # counted once at accept, uncounted once
        consumer.counted = None
        _open_clients[kind] -= 1


class RunTraceConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_AUTHENTICATED)
            return
        after = _after(self.scope)
        if after is None:
            await self.close(code=BAD_REQUEST)
            return
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        if not await _visible(user, self.run_id):
            await self.close(code=NOT_FOUND)
            return
        self.last = after
        self.lock = asyncio.Lock()
        # Join the group before the replay: an event committed during the replay rings a
        # doorbell we already listen to, and the "after last" read picks it up.
        await self.channel_layer.group_add(run_group(self.run_id), self.channel_name)
        await self.accept()
        self.counted = "trace"
        _open_clients["trace"] += 1
        await self.catch_up()
        await self.send_json({"type": "replayed", "last_sequence": self.last})
        self.ticker = asyncio.create_task(self._tick())

    async def disconnect(self, code: int) -> None:
        _uncount(self)
        ticker = getattr(self, "ticker", None)
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        if hasattr(self, "run_id") and hasattr(self, "lock"):
            await self.channel_layer.group_discard(run_group(self.run_id), self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # Clients only listen; a "ping" gets the position back (useful for reconnect logic).
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong", "last_sequence": self.last})

    async def trace_doorbell(self, message: dict[str, Any]) -> None:
        if message.get("sequence", 0) > self.last:
            await self.catch_up()

    async def catch_up(self) -> None:
        async with self.lock:
            while True:
                events = await _events_after(self.run_id, self.last)
                for event in events:
                    await self.send_json(event)
                    self.last = event["sequence"]
                if len(events) < BATCH:
                    return

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(CATCH_UP_S)
            await self.catch_up()


@database_sync_to_async
def _may_watch_queues(user: Any) -> bool:
    return is_operator(user) or is_reviewer(user)


@database_sync_to_async
def _counts() -> dict[str, int]:
    return selectors.queue_counts()


class ConsoleConsumer(AsyncJsonWebsocketConsumer):
    REFRESH_S = 2.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_AUTHENTICATED)
            return
        if not await _may_watch_queues(user):
            await self.close(code=PERMISSION_DENIED)
            return
        self.sent: dict[str, int] | None = None
        await self.channel_layer.group_add(CONSOLE_GROUP, self.channel_name)
        await self.accept()
        self.counted = "console"
        _open_clients["console"] += 1
        await self.push()
        self.ticker = asyncio.create_task(self._tick())

    async def disconnect(self, code: int) -> None:
        _uncount(self)
        ticker = getattr(self, "ticker", None)
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            await self.channel_layer.group_discard(CONSOLE_GROUP, self.channel_name)

    async def console_doorbell(self, message: dict[str, Any]) -> None:
        await self.push()

    async def push(self) -> None:
        counts = await _counts()
        if counts != self.sent:
            self.sent = counts
            await self.send_json({"type": "queues", **counts})

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.REFRESH_S)
            await self.push()
