"""A real OpenAI-compatible HTTP server for the model planner's tests (issue 12 item 1).

``ReplayServer`` listens on 127.0.0.1 on a random port (stdlib ``http.server`` in a thread) and
answers ``POST /v1/chat/completions`` with scripted replies, in order: recorded chat-completion
bodies (``tests/planner/recordings.json``), error statuses, a body that is not JSON, or a reply
held until the client gives up (a timeout). It records every request it received (body and
headers), so a test asserts on what actually went over the wire.

It checks protocol handling, not a model's judgement: the replies are fixed whatever is asked.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).resolve().parent.parent / "planner" / "recordings.json"


def recorded(name: str, **changes: Any) -> dict[str, Any]:
    """A recorded chat-completion response by name (a deep copy; ``changes`` replace keys)."""
    body = copy.deepcopy(json.loads(RECORDINGS.read_text(encoding="utf-8"))[name])
    body.update(changes)
    return body


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None  # a JSON value, or str for a raw (possibly non-JSON) body
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False  # hold the request until the server stops (the client times out)


def ok(name: str, **changes: Any) -> Reply:
    return Reply(body=recorded(name, **changes))


def answer(text: str) -> Reply:
    """The recorded text answer with another text (citations are markers in the text)."""
    body = recorded("answer_with_citations")
    body["choices"][0]["message"]["content"] = text
    return Reply(body=body)


def status(code: int, *, retry_after: str | None = None) -> Reply:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return Reply(status=code, body={"error": {"message": f"status {code}"}}, headers=headers)


HANG = Reply(hang=True)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any

    def user_message(self) -> str:
        return str(next(m["content"] for m in self.body["messages"] if m["role"] == "user"))

    def system_message(self) -> str:
        return str(next(m["content"] for m in self.body["messages"] if m["role"] == "system"))

    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.body.get("tools", [])]


class ReplayServer:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                with server._lock:
                    server.received.append(
                        Received(self.path, dict(self.headers.items()), json.loads(raw))
                    )
                    reply = server.script.pop(0) if server.script else status(599)
                if reply.hang:
                    # Held until the test ends; the client's own timeout gives up first.
                    server._stopping.wait(30)
                    self.close_connection = True
                    return
                text = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                payload = text.encode("utf-8")
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the test asserts on ``received``

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def play(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def start(self) -> ReplayServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
