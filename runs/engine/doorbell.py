"""Realtime is a doorbell (STYLE habit 10): after commit, announce ``(run_id, last sequence)``.

The database is the truth; listeners re-read from it. A lost ring (a Redis hiccup, or the
in-memory layer, which does not cross processes, in the embedded deployment) only delays an
event until the consumer's periodic catch-up. Ringing never fails or slows a commit:

* With a cross-process layer (Redis) rings go to one background thread per process that owns
  a persistent event loop (one connection pool), fire and forget. A group has at most one send
  in flight: rings that come meanwhile are coalesced to the latest sequence and sent when it
  returns, and at most ``MAX_SENDING`` groups send at once. (One send per ring let a busy
  process with 20 runs stepping pile up sends until Redis's connection pool refused them,
  ``MaxConnectionsError``: those rings were lost and their events waited for the catch-up.)
* With the in-memory layer the ring is delivered in place (it only reaches consumers of this
  process, whose event loop ``async_to_sync`` uses when called from a request thread).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

log = logging.getLogger(__name__)

CONSOLE_GROUP = "console"


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


def user_group(user_id: Any) -> str:
    """Every open socket of one user (runs/web/socket_guard.py): rung when that user's credentials
    or roles may have changed, so the sockets check again at once."""
    return f"user.{user_id}"


MAX_SENDING = 32  # groups sending at once (channels_redis's pool allows 100 connections)


class _Bell:
    """One daemon thread with its own loop; recreated after fork (Celery prefork children)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.pending: dict[str, dict[str, Any]] = {}
        self.sending: set[str] = set()  # groups with a send in flight (or about to start)
        self.lock = threading.Lock()
        self.limit: asyncio.Semaphore | None = None  # made in the loop's own thread
        threading.Thread(target=self.loop.run_forever, name="doorbell", daemon=True).start()

    def ring(self, group: str, message: dict[str, Any]) -> None:
        with self.lock:
            self.pending[group] = message  # coalesce: the latest sequence says it all
            start = group not in self.sending
            self.sending.add(group)
        if start:
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self._drain(group)))

    async def _drain(self, group: str) -> None:
        """Send the group's latest ring until none is left; one send at a time per group."""
        if self.limit is None:
            self.limit = asyncio.Semaphore(MAX_SENDING)
        while True:
            with self.lock:
                message = self.pending.pop(group, None)
                if message is None:
                    self.sending.discard(group)
                    return
            async with self.limit:
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


def ring_after_commit(run_id: str, sequence: int, *, queues_changed: bool = False) -> None:
    _ring(run_group(run_id), {"type": "trace.doorbell", "sequence": sequence})
    if queues_changed:
        ring_console()


def ring_console() -> None:
    _ring(CONSOLE_GROUP, {"type": "console.doorbell"})


def ring_user(user_id: Any) -> None:
    """After commit: a token, session, password, active flag or role of this user changed."""
    _ring(user_group(user_id), {"type": "auth.changed"})
