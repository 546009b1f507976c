"""Fixtures of the model planner tests: a real OpenAI-compatible HTTP server on 127.0.0.1
(``tests.support.model_server``), a fake clock and a sleeper that moves it (no real waits)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clock import FakeClock
from tests.support.model_server import ReplayServer

# Looks like nothing the secret scanner knows, so only never passing it on keeps it out.
CANARY_KEY = "canary-3e1f9b07d2c84a56-planner-endpoint-key"


class FakeSleep:
    """Records each backoff and moves the clock by it instead of waiting."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.delays_ms: list[int] = []

    def __call__(self, seconds: float) -> None:
        ms = round(seconds * 1000)
        self.delays_ms.append(ms)
        self.clock.advance(ms)


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    srv = ReplayServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_ms=1_000_000)


@pytest.fixture
def sleep(clock: FakeClock) -> FakeSleep:
    return FakeSleep(clock)
