"""/ws/console/: queue counts pushed to operators when they change."""

from __future__ import annotations

from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from agentconsole.asgi import application
from runs.start.scenarios import parse_scenario, run_scenario

pytestmark = pytest.mark.django_db(transaction=True)

SCENARIOS = Path(__file__).resolve().parents[2] / "runs" / "fixtures" / "scenarios"


def _headers(user):
    return [(b"authorization", f"Token {Token.objects.create(user=user).key}".encode())]


def _waiting_run(owner) -> None:
    scenario = parse_scenario((SCENARIOS / "s15-missing-confirmation.json").read_bytes())
    state = run_scenario(scenario, owner=owner)["state"]
    assert state["status"] == "waiting_confirmation"


def test_operator_sees_counts_change(personas):
    operator, alice = personas["operator"], personas["alice"]
    headers = _headers(operator)

    async def scenario():
        comm = WebsocketCommunicator(application, "/ws/console/", headers=headers)
        connected, _ = await comm.connect(timeout=5)
        assert connected
        first = await comm.receive_json_from(timeout=5)
        assert first == {"type": "queues", "pending_confirmations": 0, "open_handoffs": 0}
        await sync_to_async(_waiting_run)(alice)
        second = await comm.receive_json_from(timeout=10)
        assert second == {"type": "queues", "pending_confirmations": 1, "open_handoffs": 0}
        await comm.disconnect()

    async_to_sync(scenario)()


def test_users_and_anonymous_are_refused(personas):
    headers = _headers(personas["alice"])

    async def scenario():
        comm = WebsocketCommunicator(application, "/ws/console/", headers=headers)
        assert await comm.connect(timeout=5) == (False, 4403)
        comm = WebsocketCommunicator(application, "/ws/console/")
        assert await comm.connect(timeout=5) == (False, 4401)

    async_to_sync(scenario)()
