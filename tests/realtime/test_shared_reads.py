"""The trace sockets of one run share their database reads (runs.consumers._events_after).

With many sockets on a run, each doorbell used to cost one read per socket, all queued through
Channels' one thread for thread-sensitive calls. Sockets standing at the same sequence now share
one read, but a socket that must see event N (its doorbell said N committed) never joins a read
that started before that doorbell, and a socket that just connected always starts its own.
These tests replace the database read with one they finish by hand, so they assert what is
shared and what is not, not how fast anything is.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.db import OperationalError

from runs import consumers
from tests.support.loops import run_in_own_loop

RUN = "run_shared"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, asyncio.Future[Any]]]:
    started: list[tuple[int, asyncio.Future[Any]]] = []

    async def read(run_id: str, after: int, check: Any = None) -> Any:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        started.append((after, done))
        return await done

    monkeypatch.setattr(consumers, "_read_events", read)
    monkeypatch.setattr(consumers, "_heard", {})
    monkeypatch.setattr(consumers, "_reading", {})
    return started


async def _settle() -> None:
    # Let every task started so far run until it waits (a few turns of the loop, no clock).
    for _ in range(5):
        await asyncio.sleep(0)


def _finish(reads: list[tuple[int, asyncio.Future[Any]]], i: int, events: list[int]) -> None:
    reads[i][1].set_result(consumers.Read([{"sequence": s} for s in events]))


def test_sockets_at_one_sequence_share_one_read(reads: list) -> None:
    async def scenario() -> list[Any]:
        consumers._heard_of(RUN, 4)
        waits = [asyncio.ensure_future(consumers._events_after(RUN, 3, need=4)) for _ in range(5)]
        await _settle()
        assert len(reads) == 1  # five sockets, one read
        _finish(reads, 0, [4])
        return await asyncio.gather(*waits)

    results = run_in_own_loop(scenario)
    assert [r.frames for r in results] == [[{"sequence": 4}]] * 5
    assert consumers._reading == {}  # nothing left in flight


def test_a_newer_doorbell_never_joins_an_older_read(reads: list) -> None:
    async def scenario() -> tuple[Any, Any]:
        consumers._heard_of(RUN, 4)
        first = asyncio.ensure_future(consumers._events_after(RUN, 3, need=4))
        await _settle()
        # Event 5 commits and its doorbell arrives while the first read is still out.
        consumers._heard_of(RUN, 5)
        second = asyncio.ensure_future(consumers._events_after(RUN, 3, need=5))
        await _settle()
        assert len(reads) == 2  # the second socket could not rely on the first read
        _finish(reads, 0, [4])
        _finish(reads, 1, [4, 5])
        return await first, await second

    first, second = run_in_own_loop(scenario)
    assert [e["sequence"] for e in second.frames] == [4, 5]
    assert [e["sequence"] for e in first.frames] == [4]


def test_a_new_socket_starts_its_own_read_and_others_may_join_it(reads: list) -> None:
    async def scenario() -> None:
        consumers._heard_of(RUN, 4)
        older = asyncio.ensure_future(consumers._events_after(RUN, 0, need=4))
        await _settle()
        fresh = asyncio.ensure_future(consumers._events_after(RUN, 0, need=consumers.FRESH))
        await _settle()
        joined = asyncio.ensure_future(consumers._events_after(RUN, 0, need=4))
        await _settle()
        assert len(reads) == 2  # the replay read its own; the later socket joined it
        _finish(reads, 0, [1])
        _finish(reads, 1, [1, 2])
        assert [e["sequence"] for e in (await fresh).frames] == [1, 2]
        assert [e["sequence"] for e in (await joined).frames] == [1, 2]
        await older

    run_in_own_loop(scenario)


def test_a_socket_that_goes_away_does_not_cancel_the_shared_read(reads: list) -> None:
    async def scenario() -> Any:
        leaving = asyncio.ensure_future(consumers._events_after(RUN, 0))
        staying = asyncio.ensure_future(consumers._events_after(RUN, 0))
        await _settle()
        leaving.cancel()
        await _settle()
        _finish(reads, 0, [1])
        return await staying

    assert run_in_own_loop(scenario).frames == [{"sequence": 1}]


def test_what_was_heard_of_a_run_is_dropped_with_its_last_socket(reads: list) -> None:
    consumers._watch(RUN, +1)
    consumers._watch(RUN, +1)
    consumers._heard_of(RUN, 9)
    consumers._watch(RUN, -1)
    assert consumers._heard[RUN] == 9
    consumers._watch(RUN, -1)
    assert RUN not in consumers._heard


def test_a_reader_drops_a_broken_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader threads keep their connections between reads; one that failed (a database
    restart) is closed, so the thread's next read opens a new one instead of failing forever."""
    closed: list[bool] = []

    class Broken:
        def filter(self, **kwargs: Any) -> Any:
            raise OperationalError("server closed the connection unexpectedly")

    class Connection:
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(consumers.m.TraceEvent, "objects", Broken())
    monkeypatch.setattr(consumers, "connection", Connection())
    with pytest.raises(OperationalError):
        consumers._read_events_after(RUN, 0)
    assert closed == [True]


@pytest.mark.parametrize(
    ("pool", "readers"), [(None, 4), ({"max_size": 10}, 4), ({"max_size": 3}, 1)]
)
def test_the_readers_keep_at_most_half_the_pool(pool: Any, readers: int) -> None:
    assert consumers._reader_count(pool) == readers
