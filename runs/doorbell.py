"""Realtime: after commit, publish the committed events to the run's group (STYLE habit 10).

The database is the truth. A commit's trace events, as written (sequence-numbered, redacted by
the domain before they were stored), go to the run's group once the transaction has committed;
a listener forwards them when they follow what it sent last and reads the database only when
they do not (a gap: a lost or merged message). A batch larger than ``MAX_EVENTS`` or
``MAX_BYTES`` goes as a bare doorbell ``(run_id, last sequence)``, and the listener reads it.
A lost message (a Redis hiccup, a full channel, or the in-memory layer, which does not cross
processes, in the embedded deployment) only delays an event until the next message or the
consumer's periodic catch-up. Publishing never fails or slows a commit:

* With a cross-process layer (Redis) messages go to one background thread per process that owns
  a persistent event loop (one connection pool), fire and forget; messages for the same run
  that queue up are merged (contiguous batches joined within the bounds, else a doorbell for
  the latest sequence).
* With the in-memory layer the message is delivered in place (it only reaches consumers of this
  process, whose event loop ``async_to_sync`` uses when called from a request thread).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

log = logging.getLogger(__name__)

CONSOLE_GROUP = "console"
# Bounds of one published batch (channels_redis keeps messages in Redis lists; a big batch
# would sit in every listener's channel): beyond them, a doorbell and a database read.
MAX_EVENTS = 50
MAX_BYTES = 64_000


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


class _Bell:
    """One daemon thread with its own loop; recreated after fork (Celery prefork children)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.pending: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self.loop.run_forever, name="doorbell", daemon=True).start()

    def ring(self, group: str, message: dict[str, Any]) -> None:
        with self.lock:
            queued = self.pending.get(group)
            first = queued is None
            self.pending[group] = message if queued is None else merge(queued, message)
        if first:
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self._send(group)))

    async def _send(self, group: str) -> None:
        with self.lock:
            message = self.pending.pop(group, None)
        if message is None:
            return
        try:
            await get_channel_layer().group_send(group, message)
        except Exception as exc:  # the truth is committed; the consumer catches up
            log.warning("doorbell for %s failed: %s", group, type(exc).__name__)


_bell: _Bell | None = None
_bell_lock = threading.Lock()


def _ring(group: str, message: dict[str, Any]) -> None:
    global _bell
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        try:
            async_to_sync(layer.group_send)(group, message)
        except Exception as exc:
            log.warning("doorbell for %s failed: %s", group, type(exc).__name__)
        return
    with _bell_lock:
        if _bell is None or _bell.pid != os.getpid():
            _bell = _Bell()
        bell = _bell
    bell.ring(group, message)


def merge(queued: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """One message for two not yet sent to the same group: the events of both when the later
    batch continues the first and the sum stays within bounds, else a doorbell for the later
    sequence (the listener reads the rest from the database)."""
    if queued.get("type") == later.get("type") == "trace.events":
        events = [*queued["events"], *later["events"]]
        contiguous = later["events"][0]["sequence"] == queued["sequence"] + 1
        if contiguous and len(events) <= MAX_EVENTS:
            return {**later, "events": events}
    if later.get("type") in ("trace.events", "trace.doorbell"):
        return {"type": "trace.doorbell", "sequence": later["sequence"]}
    return later


def events_message(sequence: int, events: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The committed ``events`` (ending at ``sequence``) when they fit the bounds, else the
    doorbell for ``sequence``."""
    if events and len(events) <= MAX_EVENTS and events[-1]["sequence"] == sequence:
        try:
            size = len(json.dumps(events, separators=(",", ":")))
        except (TypeError, ValueError):
            size = MAX_BYTES + 1
        if size <= MAX_BYTES:
            return {"type": "trace.events", "sequence": sequence, "events": events}
    return {"type": "trace.doorbell", "sequence": sequence}


def ring_after_commit(
    run_id: str,
    sequence: int,
    *,
    queues_changed: bool = False,
    events: list[dict[str, Any]] | None = None,
) -> None:
    _ring(run_group(run_id), events_message(sequence, events))
    if queues_changed:
        ring_console()


def ring_console() -> None:
    _ring(CONSOLE_GROUP, {"type": "console.doorbell"})
