"""Sockets with one credential watching one thing share their credential checks
(runs.web.socket_guard._shared), but a socket never relies on a check that started before its own
read finished: such a check may have missed a revocation committed before the events the socket
is about to send. The checks here are futures the test finishes by hand, so the tests assert
what is shared and what is not, not how fast anything is.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runs.web import socket_guard
from tests.support.loops import run_in_own_loop

KEY = ("credential", ("run", "run_shared"))
DENIED = (socket_guard.NOT_AUTHENTICATED, socket_guard.TOKEN_REVOKED)


class Checks:
    """The checks started, each a future the test finishes by hand."""

    def __init__(self) -> None:
        self.started: list[asyncio.Future[Any]] = []

    def start(self) -> asyncio.Future[Any]:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.started.append(done)
        return done

    def ask(self, after: int) -> asyncio.Future[Any]:
        """A socket asks, having finished its read when ``after`` checks had started."""
        return asyncio.ensure_future(socket_guard._shared(KEY, self.start, after=after))


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Checks:
    monkeypatch.setattr(socket_guard, "_checking", {})
    return Checks()


async def _settle() -> None:
    # Let every task started so far run until it waits (a few turns of the loop, no clock).
    for _ in range(5):
        await asyncio.sleep(0)


def test_sockets_whose_reads_finished_before_a_check_started_share_it(checks: Checks) -> None:
    async def scenario() -> list[Any]:
        floor = socket_guard.checks_started()  # five sockets' reads finish here
        waits = [checks.ask(floor) for _ in range(5)]
        await _settle()
        assert len(checks.started) == 1  # five sockets, one check
        checks.started[0].set_result(DENIED)
        return await asyncio.gather(*waits)

    assert run_in_own_loop(scenario) == [DENIED] * 5
    assert socket_guard._checking == {}  # nothing left in flight


def test_a_socket_whose_read_finished_later_does_not_join_an_older_check(checks: Checks) -> None:
    async def scenario() -> tuple[Any, Any]:
        first = checks.ask(socket_guard.checks_started())
        await _settle()
        # Another socket's read finishes while the first check is out: a revocation may have
        # committed between that check's start and the events this socket read.
        second = checks.ask(socket_guard.checks_started())
        await _settle()
        assert len(checks.started) == 2
        checks.started[0].set_result(None)  # the older check saw the token still there
        checks.started[1].set_result(DENIED)
        return await first, await second

    assert run_in_own_loop(scenario) == (None, DENIED)


def test_a_socket_that_goes_away_does_not_cancel_the_shared_check(checks: Checks) -> None:
    async def scenario() -> Any:
        floor = socket_guard.checks_started()
        leaving, staying = checks.ask(floor), checks.ask(floor)
        await _settle()
        leaving.cancel()
        await _settle()
        checks.started[0].set_result(DENIED)
        return await staying

    assert run_in_own_loop(scenario) == DENIED
