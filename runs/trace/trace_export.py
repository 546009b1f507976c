"""A run's trace as a file (issue 24 item 5): JSON (one array) or NDJSON (one event a line).

Each event is what ``GET /api/runs/<id>/events/`` gives for it (``sequence``, ``event``,
``proposal_id``, ``details``, ``created_at``, and the page's ``summary`` and ``tone``); the
details were masked when the event was recorded, so the file holds the tags, never a secret.

The events are read in keyset batches of ``BATCH`` (``sequence > last``, the unique index of
the trace): memory stays bounded whatever the trace's length, and no database cursor stays
open while a slow client reads. A run still going may add events meanwhile: the file is the
trace as far as the last batch read it, a prefix with no gap (sequences only grow).

Who may download is the caller's business (``selectors.access_run`` first, as the run page).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async

from runs import models as m
from runs.domain.console import timeline

BATCH = 500
FORMATS = {"json": "application/json", "ndjson": "application/x-ndjson"}
_FIELDS = ("sequence", "event", "proposal_id", "details", "created_at")


def _batch(run_id: str, after: int) -> list[dict[str, Any]]:
    rows = m.TraceEvent.objects.filter(run_id=run_id, sequence__gt=after).order_by("sequence")
    return list(rows.values(*_FIELDS)[:BATCH])


def _event(row: dict[str, Any]) -> str:
    said = timeline.said(row)
    # As DRF writes a time in the events API: ISO 8601, UTC as "Z".
    stamp = row["created_at"].isoformat().replace("+00:00", "Z")
    out = dict(row, created_at=stamp, **said)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


class _Writer:
    """The text of one batch in the file's format; JSON puts the commas between events."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.written = 0

    def head(self) -> bytes:
        return b"[" if self.fmt == "json" else b""

    def part(self, rows: list[dict[str, Any]]) -> bytes:
        if not rows:
            return b""
        if self.fmt == "ndjson":
            text = "".join(_event(r) + "\n" for r in rows)
        else:
            text = ("," if self.written else "") + ",\n".join(_event(r) for r in rows)
        self.written += len(rows)
        return text.encode()

    def tail(self) -> bytes:
        return b"]\n" if self.fmt == "json" else b""


def trace_chunks(*, run_id: str, fmt: str) -> Iterator[bytes]:
    """The file, a batch at a time (a WSGI server, the test client)."""
    writer = _Writer(fmt)
    yield writer.head()
    after = 0
    while True:
        rows = _batch(run_id, after)
        yield writer.part(rows)
        if len(rows) < BATCH:
            break
        after = rows[-1]["sequence"]
    yield writer.tail()


async def trace_chunks_async(*, run_id: str, fmt: str) -> AsyncIterator[bytes]:
    """The same file for an ASGI server (daphne): Django drains a synchronous iterator into a
    list before serving it asynchronously, so a long trace would sit in memory whole; here
    each batch is read in a thread and sent before the next is read."""
    writer = _Writer(fmt)
    yield writer.head()
    after = 0
    read = sync_to_async(_batch, thread_sensitive=True)
    while True:
        rows = await read(run_id, after)
        yield writer.part(rows)
        if len(rows) < BATCH:
            break
        after = rows[-1]["sequence"]
    yield writer.tail()
