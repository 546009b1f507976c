"""Realtime is a doorbell (STYLE habit 10): after commit, announce ``(run_id, last sequence)``.

The database is the truth; listeners re-read from it. A lost ring (a Redis hiccup, or the
in-memory layer, which does not cross processes, in the embedded deployment) only delays an
event until the consumer's periodic catch-up. Ringing never fails a commit.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

CONSOLE_GROUP = "console"


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


def ring_after_commit(run_id: str, sequence: int, *, queues_changed: bool = False) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        send = async_to_sync(layer.group_send)
        send(run_group(run_id), {"type": "trace.doorbell", "sequence": sequence})
        if queues_changed:
            send(CONSOLE_GROUP, {"type": "console.doorbell"})
    except Exception as exc:  # the truth is committed; a missed ring is caught up later
        log.warning("doorbell for run %s failed: %s", run_id, type(exc).__name__)


def ring_console() -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(CONSOLE_GROUP, {"type": "console.doorbell"})
    except Exception as exc:
        log.warning("console doorbell failed: %s", type(exc).__name__)
