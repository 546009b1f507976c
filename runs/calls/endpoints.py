"""One send of a recorded model request to its endpoint, asynchronously (the gateway's I/O).

One ``openai.AsyncOpenAI`` client per endpoint, its connection pool as large as the endpoint's
``max_in_flight`` (the library's default pool would queue calls the database already let go).
The client's own retries are off: a failed attempt goes back to the database as a retry with its
backoff (``runs.domain.model_planning.next_delay_ms``), so a 429's wait holds no slot.

What a response or a failure means is the pure ``runs.domain.model_planning`` (the same rules as
the inline planner, ``runs.planners.openai_planner``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from runs.domain import model_planning as mp
from runs.planners.openai_planner import PLACEHOLDER_KEY, ModelEndpoint, failure_of, json_body


@dataclass(frozen=True)
class Sent:
    """How one send ended: ``reply`` (the response body as JSON, None when it is not JSON:
    interpreted as a malformed response) or ``failure``; its latency and HTTP status."""

    reply: Any = None
    failure: mp.CallFailure | None = None
    status: int | None = None
    latency_s: float = 0.0


def client_for(endpoint: ModelEndpoint) -> openai.AsyncOpenAI:
    limits = httpx.Limits(
        max_connections=endpoint.max_in_flight, max_keepalive_connections=endpoint.max_in_flight
    )
    return openai.AsyncOpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or PLACEHOLDER_KEY,
        max_retries=0,
        timeout=endpoint.timeout_s,
        http_client=httpx.AsyncClient(limits=limits, timeout=endpoint.timeout_s),
    )


async def send(client: openai.AsyncOpenAI, body: dict[str, Any], *, timeout_s: float) -> Sent:
    """One attempt; never raises for what the endpoint does (cancellation passes through)."""
    started = time.monotonic()
    try:
        raw = await client.chat.completions.with_raw_response.create(**body, timeout=timeout_s)
    except openai.APIError as exc:
        failure = failure_of(exc)
        return Sent(failure=failure, status=failure.status, latency_s=time.monotonic() - started)
    # A body that is not JSON is None: interpreted as a malformed response (PARSE_ERROR).
    reply = json_body(raw.text)
    return Sent(reply=reply, status=raw.status_code, latency_s=time.monotonic() - started)
