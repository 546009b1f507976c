"""/ws/console/: the queue page's live list (issue 24 item 2). A page that sends
``queue.watch`` hears ``queue.added`` for rows now waiting under its filters and
``queue.removed`` (with who decided) for shown rows that left; frames carry ids and safe
fields only, never an argument value.

Personas: alice (user; owns the waiting runs), operator (watches), operator2 (decides
elsewhere), a reviewer (sees the counts, may not watch the queue).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agentconsole.asgi import application
from policy.models import Confirmation
from runs import services
from tests.realtime.test_console_socket import _waiting_run
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def _headers(user: Any) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Token {Token.objects.create(user=user).key}".encode())]


async def _until(comm: WebsocketCommunicator, kind: str, timeout: float = 10) -> dict[str, Any]:
    """Frames are read until one of ``kind`` (counts frames may come between)."""
    while True:
        frame = await comm.receive_json_from(timeout=timeout)
        if frame["type"] == kind:
            return frame
        assert frame["type"] == "queues", frame


async def _watching(headers: Any, query: str = "") -> WebsocketCommunicator:
    """A console socket past its first counts frame, watching the queue under ``query``."""
    comm = WebsocketCommunicator(application, "/ws/console/", headers=headers)
    assert (await comm.connect(timeout=5))[0]
    await _until(comm, "queues")
    since = timezone.now().isoformat()
    await comm.send_json_to({"type": "queue.watch", "query": query, "shown": [], "since": since})
    return comm


def _pending() -> Confirmation:
    return Confirmation.objects.filter(status="pending").latest("requested_at")


def _decide_elsewhere(user: Any) -> None:
    row = _pending()
    services.confirmation_decide(
        confirmation_id=row.pk, approved=True, shown_hash=row.proposal_hash, by=user
    )


def test_a_new_item_arrives_and_a_decided_one_leaves_saying_by_whom(personas):
    operator, alice = personas["operator"], personas["alice"]
    other = make_user("operator2", "operator")
    headers = _headers(operator)

    async def scenario():
        comm = await _watching(headers)
        await sync_to_async(_waiting_run)(alice)
        row = await sync_to_async(_pending)()
        added = await _until(comm, "queue.added")
        (item,) = added["items"]
        assert item["id"] == row.pk
        assert item["run_id"] == row.run_id
        assert set(item) == {"id", "run_id", "tool_name", "side_effect", "untrusted", "sort_key"}
        assert (item["tool_name"], item["side_effect"]) == ("save_preference", "idempotent-write")
        # No argument value, no key: what the page needs to fetch the row, nothing more.
        assert "zh-CN" not in json.dumps(added)
        assert "answer_language" not in json.dumps(added)
        await sync_to_async(_decide_elsewhere)(other)
        removed = await _until(comm, "queue.removed")
        assert removed["items"] == [
            {"id": row.pk, "run_id": row.run_id, "tool_name": "save_preference",
             "note": "decided elsewhere: approved by operator2"}
        ]  # fmt: skip
        await comm.disconnect()

    async_to_sync(scenario)()


def test_an_item_outside_the_filters_is_not_announced(personas):
    operator, alice = personas["operator"], personas["alice"]
    headers = _headers(operator)

    async def scenario():
        comm = await _watching(headers, "tool=publish_notice")
        await sync_to_async(_waiting_run)(alice)
        counts = await _until(comm, "queues")
        assert counts["pending_confirmations"] == 1
        # Two refresh periods: the doorbell and the tick both looked and found nothing to add.
        assert await comm.receive_nothing(timeout=4.5)
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.parametrize(
    ("who", "watch", "code"),
    [
        ("reviewer", {"query": "", "shown": []}, "PERMISSION_DENIED"),
        ("operator", {"query": "", "shown": "all"}, "QUEUE_WATCH_INVALID"),
        ("operator", {"query": "", "shown": [1, 2]}, "QUEUE_WATCH_INVALID"),
        ("operator", {"query": "side_effect=boom", "shown": []}, "QUEUE_FILTER_INVALID"),
    ],
)
def test_a_bad_watch_is_answered_with_its_code(personas, who, watch, code):
    user = personas["operator"] if who == "operator" else make_user("rev", "reviewer")
    headers = _headers(user)

    async def scenario():
        comm = WebsocketCommunicator(application, "/ws/console/", headers=headers)
        assert (await comm.connect(timeout=5))[0]
        await _until(comm, "queues")
        await comm.send_json_to({"type": "queue.watch", **watch})
        error = await _until(comm, "queue.error")
        assert error["code"] == code
        await comm.disconnect()

    async_to_sync(scenario)()
