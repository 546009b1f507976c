"""Admission of a web process's HTTP requests: at most ``limit`` in Django at once, the rest
wait their turn on the event loop (issue 22 item 5: the web tier holds the burst).

Django serves each ASGI request's view in a thread of its own (asgiref's
``ThreadSensitiveContext``), and that thread takes a connection from the process's pool
(``DB_POOL_MAX_SIZE``). A burst of 2,000 creates once made 2,000 threads contend for 10
connections: most waited out ``DB_POOL_TIMEOUT_S`` and got 503, and 2,000 threads sharing one
interpreter lock cut the creates from about 32/s to 4/s (``bench.runs_in_flight``, N = 2,000).
Here a request beyond the limit costs a coroutine, not a thread; requests are let in in the
order they came, and only one that waited ``wait_s`` gets ``503 WEB_BUSY`` with ``Retry-After``.

Websockets are not counted (a socket lives for minutes and holds no thread between frames), nor
``/healthz`` (a load balancer must hear from a busy process that it is alive).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

# As Django's ASGIHandler declares them.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

BUSY = "WEB_BUSY"
EXEMPT = frozenset({"/healthz"})


class Admission:
    def __init__(self, app: App, *, limit: int, wait_s: float) -> None:
        if limit < 1:
            raise ValueError("the web process must admit at least one request at a time")
        self.app = app
        self.limit = limit
        self.wait_s = wait_s
        self._slots = asyncio.Semaphore(limit)
        self.waiting = 0  # requests waiting for a slot now (what /metrics could show)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in EXEMPT:
            await self.app(scope, receive, send)
            return
        self.waiting += 1
        try:
            # The semaphore wakes waiters in the order they came; one cancelled after it was
            # woken passes its slot on (asyncio.Semaphore.acquire).
            await asyncio.wait_for(self._slots.acquire(), self.wait_s)
        except TimeoutError:
            await _busy(send, retry_after_s=math.ceil(self.wait_s))
            return
        finally:
            self.waiting -= 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()


async def _busy(send: Send, *, retry_after_s: int) -> None:
    body = json.dumps(
        {
            "code": BUSY,
            "message": "The server is busy; retry shortly.",
            "extra": {"retry_after_s": retry_after_s},
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(retry_after_s).encode()),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
