"""The gateway: one asyncio process that makes the calls runs wait on (issue 22): model calls,
and the calls of tools that only wait (MCP tools, ``runs.calls.tools``).

Workers record requests (``runs.domain.gateway.calls``); the gateway sends them, thousands in flight
in one process, and hands each answered run back to the workers. Its loop:

1. Claim due calls, per model endpoint or MCP server within its limit of calls in flight,
   subjects in turn (``records.claim``: a compare-and-set under a lease, one attempt recorded
   per send).
2. Send each in a task of its own (``endpoints.send``, ``tools.make``); a task holds no
   database connection.
3. A writer records finished attempts in batches (``records.settle``: the reply before anything
   acts on it), then sends the runs owed a worker back to the queue.
4. A renewer extends the leases of the calls in flight and cancels the ones no longer ours (the
   run stopped or was cancelled: the request is abandoned).
5. Sleep until a worker rings (a new request), an attempt ends (a slot is free), a retry
   becomes due, or the poll interval passes.

Database work runs in one thread (one connection for the whole process, however many calls
wait). Time is read from ``clock`` only (deadlines, leases, retries): a test passes
its own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar

from django.db import close_old_connections, connections

from runs.calls import endpoints as ep
from runs.calls import records
from runs.calls import tools as tool_calls
from runs.calls.tools import Tools
from runs.domain.clock import SYSTEM_CLOCK, Clock, as_datetime
from runs.domain.gateway import model_planning as mp
from runs.planners.openai_planner import ModelEndpoint

log = logging.getLogger(__name__)

T = TypeVar("T")

# Finished attempts recorded per transaction, at most (a burst of replies costs a few commits).
SETTLE_BATCH = 500
# Calls claimed per endpoint and round, at most (each round is one short transaction).
CLAIM_BATCH = 500

# (kind, lane, seconds) samples of finished attempts, a model call's lane being its endpoint and
# an MCP tool call's ``mcp:<server>``: the latency histograms (in the database thread, a batch at
# a time: never a round trip on the event loop per call).
Observe = Callable[[Sequence[tuple[str, str, float]]], None]


class Gateway:
    def __init__(
        self,
        *,
        endpoints: Mapping[str, ModelEndpoint],
        owner: str,
        send_advance: Callable[[str], None],
        lease: timedelta,
        poll_s: float,
        clock: Clock = SYSTEM_CLOCK,
        observe: Observe | None = None,
        client_for: Callable[[ModelEndpoint], Any] = ep.Clients,
        doorbell: Callable[[asyncio.Event], Coroutine[Any, Any, None]] | None = None,
        tools: Callable[[], Tools] | None = None,
    ) -> None:
        self.endpoints = dict(endpoints)
        self.owner = owner
        self.send_advance = send_advance
        self.lease = lease
        self.poll_s = poll_s
        self.clock = clock
        self.observe = observe
        self.doorbell = doorbell
        # The tools it calls (issue 22 item 4), read again each round calls are claimed (an
        # operator's acceptance reaches the next call). None: model calls only.
        self.tools = tools
        self._tool_set: Tools | None = None
        self._clients = {name: client_for(e) for name, e in self.endpoints.items()}
        # One thread, so one database connection for the whole process however many calls
        # wait; each database round is a short transaction (a claim, a batch of answers).
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-db")
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._results: asyncio.Queue[records.Result] = asyncio.Queue()
        self._wake = asyncio.Event()
        self._latencies: list[tuple[str, str, float]] = []
        self.sent = 0  # attempts started by this process (the bench and the tests read it)

    @property
    def in_flight(self) -> int:
        """Calls this process is sending now."""
        return len(self._tasks)

    # --- the loop ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, shutdown_s: float = 10.0) -> None:
        """Serve until ``stop`` is set; then let calls in flight finish for up to
        ``shutdown_s`` and give the rest back to the queue."""
        helpers = [
            asyncio.create_task(self._writer()),
            asyncio.create_task(self._renewer(stop)),
        ]
        if self.doorbell is not None:
            helpers.append(asyncio.create_task(self.doorbell(self._wake)))
        try:
            while not stop.is_set():
                await self._claim_round()
                await self._sleep(stop)
            await self._shutdown(shutdown_s)
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self._in_db(connections.close_all)
            self._db.shutdown(wait=True)
            await self._close_clients()

    async def run_until_idle(self, *, limit_s: float = 30.0) -> None:
        """Claim and send until no call is due or in flight (tests and the fault lab drive one
        gateway this way, in process). Retries that are not yet due end it too."""
        writer = asyncio.create_task(self._writer())
        try:
            async with asyncio.timeout(limit_s):
                while True:
                    claimed = await self._claim_round()
                    if not claimed and not self._tasks and self._results.empty():
                        break
                    await asyncio.sleep(0.01)
        finally:
            await self._results.join()
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            await self._in_db(connections.close_all)
            await self._close_clients()

    async def _close_clients(self) -> None:
        for client in self._clients.values():
            await client.close()

    async def _sleep(self, stop: asyncio.Event) -> None:
        self._wake.clear()
        waits = [asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())]
        try:
            await asyncio.wait(waits, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _claim_round(self) -> int:
        claimed = await self._in_db(self._claim_all)
        for c in claimed:
            self._tasks[c.call_id] = asyncio.create_task(self._send(c))
        self.sent += len(claimed)
        return len(claimed)

    def _claim_all(self) -> list[records.Claimed]:
        now = as_datetime(self.clock.now_ms())
        due = records.due_lanes(now=now)  # one read: most rounds (a ring, a poll) find nothing
        if any(kind == records.MODEL and lane not in self.endpoints for kind, lane in due):
            for run_id in records.fail_unknown_endpoints(known=self.endpoints, now=now):
                self.send_advance(run_id)
        lanes = [
            (records.MODEL, n, e.max_in_flight)
            for n, e in self.endpoints.items()
            if (records.MODEL, n) in due
        ]
        servers = sorted(lane for kind, lane in due if kind == records.TOOL)
        if self.tools is not None and servers:
            self._tool_set = tool_set = self.tools()
            lanes += [(records.TOOL, s, tool_set.max_in_flight) for s in servers]  # MCP servers
        out: list[records.Claimed] = []
        for kind, lane, limit in lanes:
            out += records.claim(
                kind=kind,
                endpoint=lane,
                limit=limit,
                owner=self.owner,
                now=now,
                lease=self.lease,
                batch=CLAIM_BATCH,
            )
        return out

    async def _shutdown(self, shutdown_s: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=shutdown_s)
        left = list(self._tasks)
        for task in self._tasks.values():
            task.cancel()
        await self._results.join()
        if left:
            released = await self._in_db(lambda: records.release(owner=self.owner, ids=left))
            log.warning("gateway stopping: %d call(s) given back to the queue", released)

    # --- one call --------------------------------------------------------------------------------

    async def _send(self, c: records.Claimed) -> None:
        try:
            if c.kind == records.TOOL:
                mark = functools.partial(self._mark_sent, c)
                result = await tool_calls.make(
                    c, tools=self._tool_set, now_ms=self.clock.now_ms, mark_sent=mark
                )
                self._latencies.append((c.kind, c.endpoint, (result.latency_ms or 0) / 1000))
                self._results.put_nowait(result)
                return
            endpoint = self.endpoints[c.endpoint]
            left_s = (c.deadline_ms - self.clock.now_ms()) / 1000
            if left_s <= 0:
                failure = mp.CallFailure(mp.PLANNER_TIMEOUT, retryable=False)
                self._results.put_nowait(self._failed(c, failure, None, 0))
                return
            sent = await ep.send(
                self._clients[c.endpoint].next(), c.body, timeout_s=min(endpoint.timeout_s, left_s)
            )
            self._latencies.append((c.kind, c.endpoint, sent.latency_s))
            self._results.put_nowait(self._result(c, endpoint, sent))
        except asyncio.CancelledError:
            # Abandoned by its run (or our lease lapsed): only the attempt is recorded.
            self._results.put_nowait(records.Result(c.call_id, c.attempt, "abandoned", "abandoned"))
            raise
        except Exception:  # a bug here must not stop the other calls: queued again, later
            log.exception("gateway: call %s failed unexpectedly", c.call_id)
            later = as_datetime(self.clock.now_ms() + 1000)
            self._results.put_nowait(
                records.Result(c.call_id, c.attempt, "retry", "GATEWAY_ERROR", not_before=later)
            )
        finally:
            self._tasks.pop(c.call_id, None)

    def _result(self, c: records.Claimed, endpoint: ModelEndpoint, sent: ep.Sent) -> records.Result:
        latency_ms = int(sent.latency_s * 1000)
        if sent.failure is None:
            return records.Result(
                c.call_id,
                c.attempt,
                "answered",
                "answered",
                reply=sent.reply,
                http_status=sent.status,
                latency_ms=latency_ms,
            )
        now = self.clock.now_ms()
        delay = mp.next_delay_ms(
            sent.failure,
            attempt=c.attempt,
            max_attempts=endpoint.max_attempts,
            now_ms=now,
            deadline_ms=c.deadline_ms,
        )
        log.warning(
            "model endpoint %s: %s (status %s, attempt %d)%s",
            c.endpoint,
            sent.failure.code,
            sent.failure.status,
            c.attempt,
            f", retrying in {delay} ms" if delay is not None else "",
        )
        if delay is None:
            return self._failed(c, sent.failure, sent.status, latency_ms)
        # Queued again without a slot; the loop wakes when it is due.
        asyncio.get_running_loop().call_later(delay / 1000, self._wake.set)
        return records.Result(
            c.call_id,
            c.attempt,
            "retry",
            sent.failure.code,
            not_before=as_datetime(now + delay),
            http_status=sent.status,
            latency_ms=latency_ms,
        )

    async def _mark_sent(self, c: records.Claimed) -> bool:
        now = as_datetime(self.clock.now_ms())
        mark = functools.partial(
            records.mark_sent, owner=self.owner, call_id=c.call_id, attempt=c.attempt, now=now
        )
        return await self._in_db(mark)

    @staticmethod
    def _failed(
        c: records.Claimed, failure: mp.CallFailure, status: int | None, latency_ms: int
    ) -> records.Result:
        return records.Result(
            c.call_id,
            c.attempt,
            "failed",
            failure.code,
            failure={"code": failure.code, "status": failure.status},
            http_status=status,
            latency_ms=latency_ms,
        )

    # --- helpers ---------------------------------------------------------------------------------

    async def _writer(self) -> None:
        """Record finished attempts in batches; then send the runs on (after the commit)."""
        while True:
            batch = [await self._results.get()]
            while len(batch) < SETTLE_BATCH and not self._results.empty():
                batch.append(self._results.get_nowait())
            try:
                now = as_datetime(self.clock.now_ms())
                owed = await self._in_db(
                    functools.partial(records.settle, batch, owner=self.owner, now=now)
                )
                samples, self._latencies = self._latencies, []
                await self._in_db(functools.partial(self._after_settle, owed, samples))
            except Exception:
                # The database is away. The answers stay here and are recorded once it is back:
                # this gateway never claims its own calls again, so dropping them would leave
                # the calls under its lease until it restarts.
                log.exception("gateway: could not record %d attempt(s); retrying", len(batch))
                await asyncio.sleep(1.0)
                for result in batch:
                    self._results.put_nowait(result)
            finally:
                for _ in batch:
                    self._results.task_done()
            self._wake.set()  # slots are free again

    def _after_settle(self, owed: list[str], samples: list[tuple[str, str, float]]) -> None:
        for run_id in owed:
            self.send_advance(run_id)
        if self.observe is not None:
            self.observe(samples)

    async def _renewer(self, stop: asyncio.Event) -> None:
        interval = min(1.0, self.lease.total_seconds() / 3)
        while not stop.is_set():
            await asyncio.sleep(interval)
            ids = list(self._tasks)
            if not ids:
                continue
            now = as_datetime(self.clock.now_ms())
            try:
                held = await self._in_db(
                    functools.partial(
                        records.renew, owner=self.owner, ids=ids, now=now, lease=self.lease
                    )
                )
            except Exception:
                log.exception("gateway: could not renew leases")
                continue
            for call_id in set(ids) - held:
                task = self._tasks.get(call_id)
                if task is not None:
                    task.cancel()  # abandoned by its run, or taken over: stop waiting on it

    async def _in_db(self, fn: Callable[[], T]) -> T:
        def call() -> T:
            close_old_connections()
            return fn()

        return await asyncio.get_running_loop().run_in_executor(self._db, call)


def install_stop_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (the gateway then winds down, see ``Gateway.run``)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
