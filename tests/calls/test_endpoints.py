"""The gateway's clients of one model endpoint (runs.calls.endpoints.Clients): small pools that
together hold the endpoint's calls in flight, taken in turn."""

from __future__ import annotations

import asyncio
import json

import pytest

from runs.calls.endpoints import POOL_SIZE, Clients, Sent, send
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


class _Recorder:
    """A one-connection HTTP server that keeps what it was sent and answers ``status``."""

    def __init__(self, status: int, answer: dict[str, object], headers: str = "") -> None:
        self.status, self.answer, self.headers = status, answer, headers
        self.seen: list[tuple[str, dict[str, str], bytes]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        line, *fields = head.strip().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
        body = await reader.readexactly(int(headers["content-length"]))
        self.seen.append((line, headers, body))
        out = json.dumps(self.answer).encode()
        writer.write(
            f"HTTP/1.1 {self.status} X\r\nContent-Type: application/json\r\n{self.headers}"
            f"Content-Length: {len(out)}\r\n\r\n".encode()
            + out
        )
        await writer.drain()
        writer.close()


async def _send_once(recorder: _Recorder, body: dict[str, object]) -> Sent:
    server = await asyncio.start_server(recorder.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    endpoint = ModelEndpoint(
        name="m", base_url=f"http://127.0.0.1:{port}/v1", model="x", api_key="sk-test-key"
    )
    clients = Clients(endpoint)
    try:
        return await send(clients.next(), body, timeout_s=5)
    finally:
        await clients.close()
        server.close()


BODY: dict[str, object] = {
    "model": "x",
    "messages": [{"role": "user", "content": 'Résumé: \u00e9 "quoted" \u2603'}],
    "temperature": 0,
    "tools": [{"type": "function", "function": {"name": "search_public", "parameters": {}}}],
}


def test_the_recorded_body_is_sent_as_it_is() -> None:
    # The gateway sends the body whose hash the trace recorded: byte for byte the same JSON.
    recorder = _Recorder(200, {"choices": [{"message": {"content": "ok"}}]})

    sent = asyncio.run(_send_once(recorder, BODY))

    ((line, headers, raw),) = recorder.seen
    assert line == "POST /v1/chat/completions HTTP/1.1"
    assert json.loads(raw) == BODY
    assert headers["authorization"] == "Bearer sk-test-key"
    assert (sent.status, sent.failure, sent.reply) == (200, None, recorder.answer)


def test_a_refusal_is_a_failure_with_its_status() -> None:
    recorder = _Recorder(429, {"error": {"message": "slow down"}}, "Retry-After: 7\r\n")

    sent = asyncio.run(_send_once(recorder, BODY))

    assert sent.reply is None
    assert sent.failure is not None
    assert sent.status == 429
    assert (sent.failure.retryable, sent.failure.retry_after_ms) == (True, 7000)
