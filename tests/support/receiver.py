"""A webhook receiver on 127.0.0.1 for the notification tests: a real HTTP server in a thread
that checks each request's signature as a subscriber would (``notify.domain.signing.verify``)
and answers with the statuses it is given, in order (the last one repeats)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from notify.domain import signing


@dataclass
class Received:
    headers: dict[str, str]  # names in lower case
    body: bytes
    verified: bool

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    secret: str
    statuses: list[int]
    # The receiver's clock (seconds): the wall clock unless a test moves time by hand.
    now_s: Callable[[], float] = time.time
    # How long it holds each answer at most: it answers earlier once the block ends (``done``),
    # so a client that gave up is never waited on by the wall clock.
    delay_s: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, headers: dict[str, str], body: bytes) -> int:
        verified = signing.verify(
            self.secret,
            timestamp=headers.get(signing.TIMESTAMP_HEADER.lower(), ""),
            signature_header=headers.get(signing.SIGNATURE_HEADER.lower(), ""),
            body=body,
            now_s=self.now_s(),
        )
        with self.lock:
            self.received.append(Received(headers, body, verified))
            n = len(self.received)
        if not verified:
            return 401
        return self.statuses[min(n, len(self.statuses)) - 1]


@contextmanager
def receiver(
    secret: str,
    statuses: Sequence[int] = (200,),
    now_s: Callable[[], float] = time.time,
    delay_s: float = 0.0,
) -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 (a free port) for the block's duration."""
    box: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            # Header names in lower case: HTTP does not care, urllib sends "X-agentconsole-…".
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = box["r"].answer(headers, body)
            if box["r"].delay_s:
                box["r"].done.wait(box["r"].delay_s)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box["r"] = Receiver(
        f"http://127.0.0.1:{server.server_address[1]}/hook", secret, list(statuses), now_s, delay_s
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box["r"]
    finally:
        box["r"].done.set()
        server.shutdown()
        server.server_close()
