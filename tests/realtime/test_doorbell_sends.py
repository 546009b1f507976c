"""The doorbell's sends (runs.engine.doorbell._Bell): one in flight per group, the latest ring wins,
a bounded number of groups at once.

One send per ring let a process with many runs stepping pile up sends until the channel layer's
connection pool refused them (MaxConnectionsError in ``make bench``'s trace benchmark): those
rings were lost. A layer that holds every send until the test lets it go shows what is in flight.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from runs.engine import doorbell

WAIT_S = 10  # a bound on waiting for the bell's thread, not a speed claim


class HeldLayer:
    """Records each group_send and holds it until ``release``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[tuple[str, int]] = []
        self.in_flight: dict[str, int] = {}
        self.most_at_once = 0
        self.started = threading.Semaphore(0)
        self.finished = threading.Semaphore(0)
        self.gate = threading.Event()

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        with self.lock:
            self.in_flight[group] = self.in_flight.get(group, 0) + 1
            self.most_at_once = max(self.most_at_once, sum(self.in_flight.values()))
            assert self.in_flight[group] == 1, f"two sends in flight for {group}"
        self.started.release()
        while not self.gate.is_set():
            await asyncio.sleep(0.001)
        with self.lock:
            self.in_flight[group] -= 1
            self.sent.append((group, message["sequence"]))
        self.finished.release()


@pytest.fixture
def layer(monkeypatch: pytest.MonkeyPatch) -> HeldLayer:
    held = HeldLayer()
    monkeypatch.setattr(doorbell, "get_channel_layer", lambda: held)
    return held


def _settled(bell: doorbell._Bell) -> bool:
    """The bell's loop ran everything scheduled so far."""
    done = threading.Event()
    bell.loop.call_soon_threadsafe(done.set)
    return done.wait(WAIT_S)


def _finished(layer: HeldLayer, bell: doorbell._Bell, sends: int) -> None:
    for _ in range(sends):
        assert layer.finished.acquire(timeout=WAIT_S)
    assert _settled(bell)


def test_rings_during_a_send_are_coalesced_to_the_latest(layer: HeldLayer) -> None:
    bell = doorbell._Bell()
    bell.ring("run.a", {"sequence": 1})
    assert layer.started.acquire(timeout=WAIT_S)  # the first send is in flight, held
    for sequence in range(2, 50):
        bell.ring("run.a", {"sequence": sequence})
    layer.gate.set()
    _finished(layer, bell, 2)  # the held send, then exactly one more: the latest ring
    assert layer.sent == [("run.a", 1), ("run.a", 49)]
    assert (bell.pending, bell.sending) == ({}, set())


def test_at_most_max_sending_groups_send_at_once(
    layer: HeldLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doorbell, "MAX_SENDING", 3)
    bell = doorbell._Bell()
    for i in range(8):
        bell.ring(f"run.{i}", {"sequence": 1})
    for _ in range(3):
        assert layer.started.acquire(timeout=WAIT_S)
    assert _settled(bell)
    assert layer.most_at_once == 3  # the other five wait for a slot, none is dropped
    layer.gate.set()
    _finished(layer, bell, 8)
    assert sorted(layer.sent) == [(f"run.{i}", 1) for i in range(8)]
    assert bell.sending == set()
