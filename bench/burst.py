"""Many HTTP requests at once, each on a connection of its own (issue 22 item 5): what a web
process does with a burst of clients. Raw asyncio sockets, HTTP/1.1 with ``Connection: close``:
nothing between us and the listen queue, so a connection the server resets (a full backlog) is
counted as a reset, not retried by a client library.

Used by ``bench.runs_in_flight`` (the creates of its runs) and by
``tests/production/test_web_burst.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any = None  # JSON


@dataclass
class Outcome:
    """How one request ended: ``status`` (0 when no response came) or ``error`` (``reset``,
    ``refused``, ``timeout``, ``closed`` or an exception's name); when it was sent and answered
    (``time.time()``, seconds) and the response body as JSON (None when it is not JSON)."""

    status: int = 0
    error: str = ""
    sent_at: float = 0.0
    done_at: float = 0.0
    body: Any = None


def _encode(request: Request, host: str, port: int) -> bytes:
    payload = b"" if request.body is None else json.dumps(request.body).encode()
    head = [f"{request.method} {request.path} HTTP/1.1", f"Host: {host}:{port}"]
    head += ["Connection: close", f"Content-Length: {len(payload)}"]
    if payload:
        head.append("Content-Type: application/json")
    head += [f"{k}: {v}" for k, v in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def _parse(raw: bytes) -> tuple[int, Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, None


def _unchunk(body: bytes) -> bytes:
    out, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


async def _one(
    host: str, port: int, request: Request, start: asyncio.Event, timeout_s: float
) -> Outcome:
    await start.wait()
    out = Outcome(sent_at=time.time())
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(_encode(request, host, port))
            await writer.drain()
            raw = await reader.read()  # Connection: close — the whole response, until EOF
        out.status, out.body = _parse(raw)
        if not raw:
            out.error = "closed"  # accepted, then closed without a word
    except ConnectionResetError:
        out.error = "reset"
    except ConnectionRefusedError:
        out.error = "refused"
    except TimeoutError:
        out.error = "timeout"
    except OSError as exc:
        out.error = type(exc).__name__
    finally:
        out.done_at = time.time()
        if writer is not None:
            writer.close()
    return out


async def send_all(
    host: str, port: int, requests: list[Request], *, timeout_s: float = 120.0
) -> list[Outcome]:
    """Open one connection per request, all at once (a shared start signal), and wait for each
    answer up to ``timeout_s``. Outcomes in the order of ``requests``."""
    start = asyncio.Event()
    tasks = [asyncio.create_task(_one(host, port, r, start, timeout_s)) for r in requests]
    await asyncio.sleep(0)  # every task waits on the signal first
    start.set()
    return list(await asyncio.gather(*tasks))


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    """Responses by status (``"201"``, ``"429"``, ...) and failures by kind (``"reset"``, ...)."""
    counts: Counter[str] = Counter(o.error or str(o.status) for o in outcomes)
    return dict(sorted(counts.items()))
