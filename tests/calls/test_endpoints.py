"""The gateway's clients of one model endpoint (runs.calls.endpoints.Clients): small pools that
together hold the endpoint's calls in flight, taken in turn."""

from __future__ import annotations

import asyncio

import pytest

from runs.calls.endpoints import POOL_SIZE, Clients
from runs.planners.openai_planner import ModelEndpoint


def pool_limit(client: object) -> int:
    pool = client._client._transport._pool  # type: ignore[attr-defined]
    return int(pool._max_connections)


@pytest.mark.parametrize("max_in_flight", [1, POOL_SIZE, POOL_SIZE + 1, 200, 2000])
def test_an_endpoints_pools_are_small_and_together_hold_its_calls_in_flight(
    max_in_flight: int,
) -> None:
    endpoint = ModelEndpoint(
        name="m", base_url="http://127.0.0.1:9/v1", model="x", max_in_flight=max_in_flight
    )
    clients = Clients(endpoint)
    limits = [pool_limit(c) for c in clients.clients]
    assert max(limits) <= POOL_SIZE
    assert sum(limits) >= max_in_flight
    assert len(limits) == -(-max_in_flight // POOL_SIZE)
    # Taken in turn: every client once before any twice.
    picked = [clients.next() for _ in clients.clients]
    assert sorted(map(id, picked)) == sorted(map(id, clients.clients))
    asyncio.run(clients.close())
