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
operators, reviewers and admins whenever they change. An operator's queue page also sends
``{"type": "queue.watch", "query": <its filters>, "shown": [ids], "since": <rendered at>}``;
from then on the same pushes carry ``queue.added`` (rows now waiting under those filters, safe
fields only: ids, tool name, side effect class, untrusted flag, sort key) and
``queue.removed`` (shown rows that left, with what became of them in words). The page fetches
an added row's HTML over HTTP: no argument value ever travels on the socket.

Both close once the credential that opened them ends or their user may no longer watch
(runs/web/socket_guard.py): they check before they send what they read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentconsole import wiring
from agentconsole.kernel.roles import is_operator, is_reviewer
from policy import queue_list
from policy.domain.errors import DomainError
from runs import models as m
from runs import selectors
from runs.domain.console import timeline
from runs.engine.doorbell import CONSOLE_GROUP, run_group
from runs.web.socket_guard import (
    NOT_AUTHENTICATED,
    PERMISSION_DENIED,
    GuardedSocket,
    Verdict,
    _open_clients,
    checks_started,
    verdict,
)
from runs.web.socket_guard import open_clients as open_clients  # the gauge, read where it was

# The periodic read that covers a lost doorbell. With the in-memory layer (embedded) a
# worker's ring never reaches the web process, so it is the delivery path: keep it short.
# With Redis the doorbell is the path and this is only a safety net.
CATCH_UP_S = 1.0 if not os.environ.get("REDIS_URL") else 5.0
BATCH = 200
# Close codes (4000-4999 are the application's): the same vocabulary as the HTTP API. 4401 and
# 4403 also end an open socket (runs/web/socket_guard.py).
NOT_FOUND, BAD_REQUEST = 4404, 4400


def _after(scope: dict[str, Any]) -> int | None:
    raw = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after", ["0"])[-1]
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if 0 <= value < 2**31 else None


def _read_events_after(run_id: str, after: int) -> list[dict[str, Any]]:
    try:
        rows = list(
            m.TraceEvent.objects.filter(run_id=run_id, sequence__gt=after)
            .order_by("sequence")
            .values_list("sequence", "event", "proposal_id", "details", "created_at")[:BATCH]
        )
    except DatabaseError:
        # A broken connection (the database restarted) is not kept: the next read opens
        # another. The socket's error closes it; its client reconnects with ``after``.
        connection.close()
        raise
    frames = []
    for sequence, event, proposal_id, details, created_at in rows:
        frame = {"sequence": sequence, "event": event, "details": details}
        frames.append(
            {
                "type": "event",
                **frame,
                "proposal_id": proposal_id,
                "created_at": created_at.isoformat(),
                **timeline.said(frame),  # the page's own words for it (summary, tone)
            }
        )
    return frames


# The trace reads run in a few threads of their own, each keeping its connection between
# reads. Not Channels' thread-sensitive calls: it runs all of them in one thread, so with many
# sockets their reads queued behind each other (100 clients on 20 runs waited most of a second).
# And not a connection taken from the pool per read: the pool's health check before each use
# cost a round trip more than the read itself (py-spy of daphne under the trace benchmark).
def _reader_count(pool: Any) -> int:
    # At most half of the process's connection pool (the other half serves requests), up to 4.
    size = pool.get("max_size", 8) if isinstance(pool, dict) else 8
    return max(1, min(4, size // 2))


READERS = _reader_count(settings.DATABASES["default"].get("OPTIONS", {}).get("pool"))


def _new_readers() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="trace-read")


_readers = _new_readers()


# What a socket that starts a read asks to be checked right after it, in the read's own thread:
# (the check's key, the credential, who may watch). See ``_Socket.allowed_after``.
CheckSpec = tuple[Hashable, Any, Callable[[Any], bool]]


@dataclass(frozen=True)
class Read:
    """A read's frames and, when it had any, the verdict of the check that started right after
    it in the same thread, with that check's key (None: not checked there)."""

    frames: list[dict[str, Any]]
    checked: tuple[Hashable, Verdict] | None = None


def _read_and_check(run_id: str, after: int, check: CheckSpec | None) -> Read:
    frames = _read_events_after(run_id, after)
    if not frames or check is None:
        return Read(frames)
    key, credential, may_watch = check
    try:
        return Read(frames, (key, verdict(credential, may_watch)))
    except Exception:  # the socket checks on its own, and fails closed there
        return Read(frames)


async def _read_events(run_id: str, after: int, check: CheckSpec | None = None) -> Read:
    read = sync_to_async(_read_and_check, thread_sensitive=False, executor=_readers)
    return await read(run_id, after, check)


def close_readers() -> None:
    """Close the connections the reader threads keep, and start afresh (a test suite does this
    before its database is dropped, which PostgreSQL refuses while a session is connected)."""
    global _readers
    old, _readers = _readers, _new_readers()
    # One task per thread: each waits for the others, so every thread runs exactly one.
    together = threading.Barrier(READERS)

    def close() -> None:
        connection.close()
        together.wait(timeout=30)

    for _ in range(READERS):
        old.submit(close)
    old.shutdown(wait=True)


# Reads in flight, by (run, after): the sockets of one run in this process usually stand at the
# same sequence when its doorbell rings, and share one read instead of making one each. A read
# records the highest doorbell of its run this process had heard when it started: a socket
# that must see event N (its doorbell said N committed) joins only a read that started after
# that doorbell, so it never waits on a read that could miss N.
_heard: dict[str, int] = {}
FRESH = 2**62  # a need no read in flight covers
_reading: dict[tuple[str, int], tuple[int, asyncio.Future[Read]]] = {}


_watching: dict[str, int] = {}  # sockets per run in this process: _heard is kept while > 0


def _heard_of(run_id: str, sequence: int) -> None:
    if sequence > _heard.get(run_id, 0):
        _heard[run_id] = sequence


def _watch(run_id: str, delta: int) -> None:
    left = _watching.get(run_id, 0) + delta
    if left > 0:
        _watching[run_id] = left
    else:
        _watching.pop(run_id, None)
        _heard.pop(run_id, None)


async def _events_after(
    run_id: str, after: int, *, need: int = 0, check: CheckSpec | None = None
) -> Read:
    key = (run_id, after)
    entry = _reading.get(key)
    if entry is None or entry[0] < need:
        read = asyncio.ensure_future(_read_events(run_id, after, check))
        entry = (_heard.get(run_id, 0), read)
        _reading[key] = entry

        def done(_: Any, key: tuple[str, int] = key, read: Any = read) -> None:
            if _reading.get(key, (0, None))[1] is read:
                del _reading[key]

        read.add_done_callback(done)
    # Shielded: one socket going away does not cancel the read the others wait for.
    return await asyncio.shield(entry[1])


@database_sync_to_async
def _ownership(run_id: str) -> selectors.RunOwnership | None:
    return selectors.run_ownership(run_id=run_id)


class _Socket(GuardedSocket):
    async def in_thread(self, fn: Callable[[], Verdict]) -> Verdict:
        """The sockets' credential checks run beside their reads, for the same reason."""
        return await sync_to_async(fn, thread_sensitive=False, executor=_readers)()

    def spec(self) -> CheckSpec:
        credential = self.scope["credential"]
        return (credential, self.watched()), credential, self.may_watch

    async def allowed_after(self, checked: tuple[Hashable, Verdict] | None) -> bool:
        """May what a read returned be sent? The check made in the read's thread right after
        it answers when it is this socket's (same credential, same run): it started after the
        read finished, as ``still_allowed``'s does, without a second wait for a reader thread
        (the sockets of a run usually share one credential: its owner's). Else a check now."""
        if self.ended:
            return False
        if checked is None or checked[0] != self.spec()[0]:
            return await self.still_allowed(after=checks_started())
        if checked[1] is not None:
            await self._end(*checked[1])
            return False
        return True


def _uncount(consumer: Any) -> None:
    kind = getattr(consumer, "counted", None)
    if kind is not None:  # counted once at accept, uncounted once
        consumer.counted = None
        _open_clients[kind] -= 1


class RunTraceConsumer(_Socket):
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
        # Read once: an owner's right is then checked with no query (selectors.sees_run).
        self.ownership = await _ownership(self.run_id)
        refused = await self.open_guard() if self.ownership else (PERMISSION_DENIED, "")
        if refused is not None:
            # At connect a run the user may not watch is not found (as on the API).
            await self.close(code=NOT_FOUND if refused[0] == PERMISSION_DENIED else refused[0])
            return
        self.last = after
        self.lock = asyncio.Lock()
        # Join the group before the replay: an event committed during the replay rings a
        # doorbell we already listen to, and the "after last" read picks it up.
        await self.channel_layer.group_add(run_group(self.run_id), self.channel_name)
        await self.accept()
        self.counted = "trace"
        _open_clients["trace"] += 1
        _watch(self.run_id, +1)
        self.watching = True
        # Its own read, started after joining the group: a read already in flight may have
        # begun before an event whose doorbell rang before this socket listened.
        await self.catch_up(need=FRESH)
        if self.ended:
            return
        await self.send_json({"type": "replayed", "last_sequence": self.last})
        self.ticker = asyncio.create_task(self._tick())
        self.start_guard()

    def watched(self) -> Hashable:
        return ("run", self.run_id)

    def may_watch(self, user: Any) -> bool:
        return selectors.sees_run(user=user, run=self.ownership)

    async def disconnect(self, code: int) -> None:
        _uncount(self)
        ticker = getattr(self, "ticker", None)
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        await self.close_guard()
        if hasattr(self, "run_id") and hasattr(self, "lock"):
            await self.channel_layer.group_discard(run_group(self.run_id), self.channel_name)
        if getattr(self, "watching", False):
            self.watching = False
            _watch(self.run_id, -1)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # Clients only listen; a "ping" gets the position back (useful for reconnect logic).
        if isinstance(content, dict) and content.get("type") == "ping" and not self.ended:
            await self.send_json({"type": "pong", "last_sequence": self.last})

    async def trace_doorbell(self, message: dict[str, Any]) -> None:
        sequence = message.get("sequence", 0)
        _heard_of(self.run_id, sequence)
        if sequence > self.last:
            await self.catch_up(need=sequence)

    async def catch_up(self, *, need: int = 0) -> None:
        async with self.lock:
            while not self.ended:
                read = await _events_after(self.run_id, self.last, need=need, check=self.spec())
                events = read.frames
                # A check started after the read sees every revocation committed before these
                # events: none committed after one is sent (runs/web/socket_guard.py).
                if events and not await self.allowed_after(read.checked):
                    return
                for event in events:
                    if self.ended:  # closed meanwhile by the periodic check or a ring
                        return
                    await self.send_json(event)
                    self.last = event["sequence"]
                if len(events) < BATCH:
                    return

    async def _tick(self) -> None:
        while not self.ended:
            await asyncio.sleep(CATCH_UP_S)
            await self.catch_up()


@database_sync_to_async
def _counts() -> dict[str, int]:
    return selectors.queue_counts()


MAX_SHOWN = 500  # ids a queue page may say it shows (a page is 100, plus what arrived live)


@dataclass
class QueueWatch:
    filters: queue_list.QueueFilters
    known: set[str]
    since: Any


@database_sync_to_async
def _queue_watch(user: Any, content: dict[str, Any]) -> QueueWatch:
    """The watch a queue page asked for, checked: an operator, its filters parsed as the page
    parses them, a bounded list of ids; QUEUE_WATCH_INVALID (or the filters' code) otherwise."""
    if not is_operator(user):
        raise DomainError("Only operators watch the queue.", code="PERMISSION_DENIED")
    query, shown, since = content.get("query", ""), content.get("shown", []), content.get("since")
    if not isinstance(query, str) or len(query) > 2000:
        raise DomainError("The query is not a filter string.", code="QUEUE_WATCH_INVALID")
    if not isinstance(shown, list) or len(shown) > MAX_SHOWN:
        raise DomainError(f"At most {MAX_SHOWN} shown ids.", code="QUEUE_WATCH_INVALID")
    if not all(isinstance(i, str) and 0 < len(i) <= 128 for i in shown):
        raise DomainError("Shown ids are strings.", code="QUEUE_WATCH_INVALID")
    when = parse_datetime(since) if isinstance(since, str) and len(since) < 64 else None
    if when is None or timezone.is_naive(when):
        when = timezone.now()
    return QueueWatch(queue_list.queue_filters(QueryDict(query)), set(shown), when)


@database_sync_to_async
def _queue_changes(user: Any, watch: QueueWatch) -> queue_list.QueueChanges:
    return queue_list.queue_changes(
        viewer=user,
        registry=wiring.registry(),
        filters=watch.filters,
        known=watch.known,
        since=watch.since,
        now=timezone.now(),
    )


class ConsoleConsumer(_Socket):
    REFRESH_S = 2.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=NOT_AUTHENTICATED)
            return
        refused = await self.open_guard()
        if refused is not None:
            await self.close(code=refused[0])
            return
        self.sent: dict[str, int] | None = None
        self.watch: QueueWatch | None = None
        self.pushing = asyncio.Lock()  # a ring and the tick never send one change twice
        await self.channel_layer.group_add(CONSOLE_GROUP, self.channel_name)
        await self.accept()
        self.counted = "console"
        _open_clients["console"] += 1
        await self.push()
        self.ticker = asyncio.create_task(self._tick())
        self.start_guard()

    def watched(self) -> Hashable:
        return "console"

    def may_watch(self, user: Any) -> bool:
        return is_operator(user) or is_reviewer(user)

    async def disconnect(self, code: int) -> None:
        _uncount(self)
        ticker = getattr(self, "ticker", None)
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            await self.channel_layer.group_discard(CONSOLE_GROUP, self.channel_name)
        await self.close_guard()

    async def console_doorbell(self, message: dict[str, Any]) -> None:
        await self.push()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "queue.watch" or self.ended:
            return
        try:
            watch = await _queue_watch(self.scope["user"], content)
        except DomainError as exc:
            await self.send_json({"type": "queue.error", "code": exc.code, "message": exc.message})
            return
        async with self.pushing:
            self.watch = watch
        await self.push()

    async def push(self) -> None:
        async with self.pushing:
            counts = await _counts()
            watch = self.watch
            changes = await _queue_changes(self.scope["user"], watch) if watch else None
            news = changes is not None and bool(changes.added or changes.removed)
            # Checked after the reads, before sending (runs/web/socket_guard.py).
            if (counts == self.sent and not news) or not await self.still_allowed(
                after=checks_started()
            ):
                return
            if counts != self.sent:
                self.sent = counts
                await self.send_json({"type": "queues", **counts})
            if watch is None or changes is None:
                return
            if changes.removed:
                watch.known -= {item["id"] for item in changes.removed}
                await self.send_json({"type": "queue.removed", "items": changes.removed})
            if changes.added:
                watch.known |= {item["id"] for item in changes.added}
                await self.send_json({"type": "queue.added", "items": changes.added})

    async def _tick(self) -> None:
        while not self.ended:
            await asyncio.sleep(self.REFRESH_S)
            await self.push()
