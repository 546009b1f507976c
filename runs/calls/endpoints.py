"""One send of a recorded model request to its endpoint, asynchronously (the gateway's I/O).

Each endpoint gets a few ``openai.AsyncOpenAI`` clients (``Clients``) whose connection pools
together are as large as the endpoint's ``max_in_flight`` (the library's default pool would queue
calls the database already let go). Several small pools, not one large one: httpcore looks at
every connection of its pool on each request's events, so one pool's cost per call grows with
the calls in flight (py-spy of the gateway with 200 calls waiting: most of its time was there).
The client's own retries are off: a failed attempt goes back to the database as a retry with its
backoff (``runs.domain.gateway.model_planning.next_delay_ms``), so a 429's wait holds no slot.

What a response or a failure means is the pure ``runs.domain.gateway.model_planning`` (the same
rules as the inline planner, ``runs.planners.openai_planner``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from runs.domain.gateway import model_planning as mp
from runs.planners.openai_planner import PLACEHOLDER_KEY, ModelEndpoint, failure_of, json_body


@dataclass(frozen=True)
class Sent:
    """How one send ended: ``reply`` (the response body as JSON, None when it is not JSON:
    interpreted as a malformed response) or ``failure``; its latency and HTTP status."""

    reply: Any = None
    failure: mp.CallFailure | None = None
    status: int | None = None
    latency_s: float = 0.0


# Connections per client: a pool this small costs little to scan.
POOL_SIZE = 32


class Clients:
    """The clients of one endpoint, taken in turn: ``ceil(max_in_flight / POOL_SIZE)`` of
    them, each with a pool of at most POOL_SIZE connections."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        limit = max(1, endpoint.max_in_flight)
        count = -(-limit // POOL_SIZE)
        size = -(-limit // count)
        self.clients = [_client(endpoint, size) for _ in range(count)]
        self._turn = 0

    def next(self) -> openai.AsyncOpenAI:
        self._turn = (self._turn + 1) % len(self.clients)
        return self.clients[self._turn]

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


def _client(endpoint: ModelEndpoint, size: int) -> openai.AsyncOpenAI:
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    client = openai.AsyncOpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or PLACEHOLDER_KEY,
        max_retries=0,
        timeout=endpoint.timeout_s,
        http_client=httpx.AsyncClient(limits=limits, timeout=endpoint.timeout_s),
    )
    return client


async def send(client: openai.AsyncOpenAI, body: dict[str, Any], *, timeout_s: float) -> Sent:
    """One attempt; never raises for what the endpoint does (cancellation passes through)."""
    started = time.monotonic()
    try:
        # The recorded body as it is: ``chat.completions.create`` would first walk every
        # message through the library's parameter transform (a sixth of the gateway's CPU with
        # 200 calls in flight, py-spy), which changes nothing in a body that is plain JSON.
        # The library still sends it, with its headers, time-out and error types.
        raw = await client.post(
            "/chat/completions", cast_to=httpx.Response, body=body, options={"timeout": timeout_s}
        )
    except openai.APIError as exc:
        failure = failure_of(exc)
        return Sent(failure=failure, status=failure.status, latency_s=time.monotonic() - started)
    # A body that is not JSON is None: interpreted as a malformed response (PARSE_ERROR).
    reply = json_body(raw.text)
    return Sent(reply=reply, status=raw.status_code, latency_s=time.monotonic() - started)
