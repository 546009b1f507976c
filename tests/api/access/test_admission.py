"""The web process's admission (agentconsole/ops/admission.py): at most ``limit`` HTTP requests in
the application at once, the rest let in in the order they came; one that waited too long gets
503 WEB_BUSY with Retry-After; websockets and /healthz are never held back. Plain asyncio, no
server: the application is a coroutine that holds each request until the test lets it go.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentconsole.ops.admission import Admission


class App:
    """An ASGI application that records who is inside and answers when released."""

    def __init__(self) -> None:
        self.inside: list[str] = []
        self.entered: list[str] = []
        self.peak = 0
        self.release = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.inside.append(scope["path"])
        self.entered.append(scope["path"])
        self.peak = max(self.peak, len(self.inside))
        await self.release.wait()
        self.inside.remove(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(app: Any, path: str, kind: str = "http") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    await app({"type": kind, "path": path}, receive, send)
    return sent


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_no_more_than_the_limit_are_inside_and_the_rest_enter_in_arrival_order() -> None:
    async def scenario() -> tuple[App, list[list[dict[str, Any]]]]:
        app = App()
        admitted = Admission(app, limit=3, wait_s=30)
        calls = [asyncio.create_task(call(admitted, f"/r{i}")) for i in range(10)]
        await settle()
        assert app.inside == ["/r0", "/r1", "/r2"]
        assert admitted.waiting == 7
        app.release.set()
        return app, await asyncio.gather(*calls)

    app, answers = asyncio.run(scenario())

    assert app.peak == 3
    assert app.entered == [f"/r{i}" for i in range(10)]
    assert all(a[0]["status"] == 200 for a in answers)


def test_a_request_that_waits_too_long_gets_503_with_retry_after() -> None:
    async def scenario() -> list[dict[str, Any]]:
        app = App()
        admitted = Admission(app, limit=1, wait_s=0.05)
        first = asyncio.create_task(call(admitted, "/slow"))
        await settle()
        answer = await call(admitted, "/late")
        app.release.set()
        await first
        assert admitted.waiting == 0
        return answer

    start, body = asyncio.run(scenario())

    assert start["status"] == 503
    assert dict(start["headers"])[b"retry-after"] == b"1"
    assert json.loads(body["body"])["code"] == "WEB_BUSY"


def test_a_slot_given_up_by_a_timed_out_waiter_goes_to_the_next() -> None:
    async def scenario() -> App:
        app = App()
        admitted = Admission(app, limit=1, wait_s=0.05)
        first = asyncio.create_task(call(admitted, "/first"))
        await settle()
        await call(admitted, "/gave-up")  # 503 after 0.05 s
        admitted.wait_s = 30
        after = asyncio.create_task(call(admitted, "/after"))
        await settle()
        app.release.set()
        await asyncio.gather(first, after)
        return app

    app = asyncio.run(scenario())

    assert app.entered == ["/first", "/after"]


def test_websockets_and_the_health_check_are_never_held_back() -> None:
    async def scenario() -> list[str]:
        app = App()
        admitted = Admission(app, limit=1, wait_s=30)
        busy = asyncio.create_task(call(admitted, "/busy"))
        await settle()
        health = asyncio.create_task(call(admitted, "/healthz"))
        socket = asyncio.create_task(call(admitted, "/ws/console/", kind="websocket"))
        await settle()
        inside = list(app.inside)
        app.release.set()
        await asyncio.gather(busy, health, socket)
        return inside

    assert asyncio.run(scenario()) == ["/busy", "/healthz", "/ws/console/"]
