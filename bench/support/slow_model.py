"""A slow OpenAI-compatible chat-completions server: asyncio, a fixed delay per completion.

Stands in for a real model endpoint in ``make bench`` (runs_in_flight) and in the tests of the
gateway on real processes: a model takes seconds to answer, and what we measure is how many
runs can wait on it at once. It plays a small, deterministic agent:

- while no tool result is in view: call ``search_public`` with a query from the goal;
- once a ``tool-<n>`` observation is in view: answer, citing it.

It counts what it served: requests per goal, calls in flight now and at peak. ``status`` and
``hang`` script failures for the fault tests (a 429 with Retry-After, a request held until the
client gives up). Bound to 127.0.0.1 on a free port; ``start()`` returns once it listens.

Run alone: ``python -m bench.support.slow_model --delay 1 --port 8099``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TOOL_OBSERVATION = re.compile(r'"observation_id": "(tool-\d+)"')
GOAL = re.compile(r"Goal \(from the user\): (.*)")


@dataclass
class Script:
    """Failures to serve before the agent's answers: each entry is taken by one request."""

    replies: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # (status, headers)
    hang: int = 0  # the next this-many requests are held until the client gives up


class SlowModel:
    def __init__(self, *, delay_s: float = 1.0, port: int = 0) -> None:
        self.delay_s = delay_s
        self.port = port
        self.script = Script()
        self.requests: Counter[str] = Counter()  # by goal
        self.in_flight = 0
        self.peak_in_flight = 0
        self.total = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._clients: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- in a thread of its own (tests, the bench) ------------------------------------------

    def start(self) -> SlowModel:
        self._thread = threading.Thread(target=self._serve_forever, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("slow model server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            done = asyncio.run_coroutine_threadsafe(self._close(), self._loop)
            done.result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        if self._loop is not None:
            self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)

    def _serve_forever(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self.listen())
        self._ready.set()
        with contextlib.suppress(RuntimeError):
            self._loop.run_forever()

    async def listen(self) -> None:
        self._server = await asyncio.start_server(
            self._client, "127.0.0.1", self.port, backlog=4096, limit=2**22
        )
        self.port = self._server.sockets[0].getsockname()[1]

    # --- HTTP/1.1, keep-alive, just enough for the openai client ------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                status, headers, body = await self._answer(request)
                payload = json.dumps(body).encode()
                head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}"]
                head += ["content-type: application/json", f"content-length: {len(payload)}"]
                head += [f"{k}: {v}" for k, v in headers.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._clients.discard(task)

    async def _answer(self, request: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        text = _user_text(request)
        goal = GOAL.search(text)
        with self._lock:
            self.total += 1
            self.requests[goal.group(1) if goal else ""] += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            scripted = self.script.replies.pop(0) if self.script.replies else None
            hang = self.script.hang > 0
            self.script.hang -= 1 if hang else 0
        try:
            if hang:
                await asyncio.sleep(3600)  # the client's own timeout gives up first
            await asyncio.sleep(self.delay_s)
            if scripted is not None:
                return scripted[0], scripted[1], {"error": {"message": "scripted"}}
            return 200, {}, _completion(request, text)
        finally:
            with self._lock:
                self.in_flight -= 1


async def _read_request(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    line = await reader.readline()
    if not line:
        return None
    length = 0
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    raw = await reader.readexactly(length) if length else b"{}"
    parsed = json.loads(raw)
    return parsed if isinstance(parsed, dict) else {}


def _user_text(request: dict[str, Any]) -> str:
    messages = request.get("messages") or []
    return "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")


def _completion(request: dict[str, Any], text: str) -> dict[str, Any]:
    seen = TOOL_OBSERVATION.findall(text)
    if seen:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": f"Here is what the corpus says [obs:{seen[-1]}].",
        }
    else:
        goal = GOAL.search(text)
        query = (goal.group(1) if goal else "retries")[:80]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "search_public",
                        "arguments": json.dumps({"query": query}),
                    },
                }
            ],
        }
    return {
        "id": "chatcmpl-slow",
        "object": "chat.completion",
        "model": request.get("model", "slow"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


_REASONS = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Unavailable"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    server = SlowModel(delay_s=args.delay, port=args.port)

    async def serve() -> None:
        await server.listen()
        print(f"slow model on {server.base_url} (delay {args.delay} s)", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
