"""issue 21 item 6: an open socket does not outlive its token, session, account or role.

Each cause — the token revoked (``DELETE /api/auth/token/``), the token expired, the password
changed (a token socket and a session socket), the account deactivated, the role that let it
watch removed, the session signed out — is tried along each path that can close the socket
(runs/web/socket_guard.py):

- ``ring``: the user's doorbell, rung after commit (agentconsole/access/ws_revoke.py). The periodic
  check and the trace's catch-up are out of reach, so only the ring can close it;
- ``doorbell``: the ring is silenced and events are committed after the revocation: the check
  before sending them closes the socket and not one of them is sent;
- ``periodic``: the ring is silenced, nothing is committed: the check every
  AGENTCONSOLE_WS_RECHECK_S (short here) closes it.

Each asserts the close code and reason, and that no event frame arrives after the revocation,
nor after the close when more events are committed. Time is the application's clock, moved by
hand (an expiry never sleeps). The layer is in-memory, or Redis when REDIS_URL is set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agentconsole.access import ws_revoke
from agentconsole.access.ws_auth import TokenOrSessionAuth
from agentconsole.asgi import application
from agentconsole.routing import websocket_urlpatterns
from runs import consumers
from tests.realtime.test_console_socket import _waiting_run
from tests.realtime.test_trace_socket import _append, _run_for
from tests.support.clock import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

TTL_S = 3600
SHORT_S = 0.05  # the periodic check's interval when a test relies on it
WAIT_S = 10  # a bound on waiting for a close, not a speed claim
QUIET_S = 0.5  # how long "nothing more arrives" is watched


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(clock: FakeClock) -> Any:
    """The socket stack with the test's clock, for an expiry (agentconsole/asgi.py builds it
    with the system's). Every other cause is tried on the application itself."""
    return TokenOrSessionAuth(URLRouter(websocket_urlpatterns), clock=clock)


def _stack(cause: str, app: Any) -> Any:
    return app if cause == "token-expired" else application


@pytest.fixture
def path(request: pytest.FixtureRequest, settings: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    settings.AGENTCONSOLE_TOKEN_TTL_S = TTL_S
    # The trace's periodic catch-up is out of reach: events arrive by their doorbell only.
    monkeypatch.setattr(consumers, "CATCH_UP_S", 3600)
    monkeypatch.setattr(consumers.ConsoleConsumer, "REFRESH_S", 3600)
    path = request.param
    settings.AGENTCONSOLE_WS_RECHECK_S = SHORT_S if path == "periodic" else 3600
    if path != "ring":
        monkeypatch.setattr(ws_revoke, "ring_user", lambda user_id: None)
    return path


def _token_headers(user: Any) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Token {Token.objects.get_or_create(user=user)[0].key}".encode())]


def _session(user: Any) -> tuple[Client, list[tuple[bytes, bytes]]]:
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return client, [(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")]


async def _open(app: Any, path: str, headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(app, path, headers=headers)
    connected, code = await comm.connect(timeout=WAIT_S)
    assert connected, code
    return comm


async def _closed_without_events(comm: WebsocketCommunicator, code: int, reason: str) -> None:
    """The socket closes with ``code`` and ``reason``; the one frame before the close names the
    reason (daphne drops a close's reason); no event or count frame comes after the revocation."""
    frames = []
    while (out := await comm.receive_output(timeout=WAIT_S))["type"] != "websocket.close":
        frame = json.loads(out["text"])
        assert frame["type"] == "closed", f"sent after the revocation: {frame}"
        frames.append(frame)
    assert (out.get("code"), out.get("reason")) == (code, reason)
    assert [f["code"] for f in frames] == [reason]


# -- the trace socket ---------------------------------------------------------------------------


def _revoke_token(user: Any, key: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.delete("/api/auth/token/").status_code == 204


def _change_password(user: Any) -> None:
    user.set_password("a-new-password")
    user.save()


def _deactivate(user: Any) -> None:
    user.is_active = False
    user.save()


def _remove_role(user: Any) -> None:
    user.groups.remove(Group.objects.get(name="operator"))


CAUSES: dict[str, tuple[str, str, int, str]] = {
    # cause: (who watches alice's run, how it authenticates, close code, reason)
    "token-revoked": ("alice", "token", 4401, "TOKEN_REVOKED"),
    "token-expired": ("alice", "token", 4401, "TOKEN_EXPIRED"),
    "password-token": ("alice", "token", 4401, "TOKEN_REVOKED"),
    "password-session": ("alice", "session", 4401, "SESSION_ENDED"),
    "signed-out": ("alice", "session", 4401, "SESSION_ENDED"),
    "deactivated": ("alice", "token", 4401, "USER_INACTIVE"),
    "role-removed": ("operator", "token", 4403, "ACCESS_REVOKED"),
}


# Nobody rings when a token expires: the checks before sending and the periodic one find it.
CASES = [
    (cause, path)
    for cause in CAUSES
    for path in ("ring", "doorbell", "periodic")
    if (cause, path) != ("token-expired", "ring")
]


def _end(cause: str, user: Any, clock: FakeClock, key: str, client: Client | None) -> None:
    """Bring about the cause, through the product's own paths."""
    actions: dict[str, Callable[[], Any]] = {
        "token-revoked": lambda: _revoke_token(user, key),
        "token-expired": lambda: clock.advance((TTL_S + 60) * 1000),  # past the token's creation
        "password-token": lambda: _change_password(user),
        "password-session": lambda: _change_password(user),
        "signed-out": lambda: client.logout() if client else None,
        "deactivated": lambda: _deactivate(user),
        "role-removed": lambda: _remove_role(user),
    }
    actions[cause]()


@pytest.mark.parametrize(("cause", "path"), CASES, indirect=["path"])
def test_trace_socket_closes_when_its_credential_or_right_ends(
    personas: dict, app: Any, clock: FakeClock, cause: str, path: str
) -> None:
    watcher, auth, code, reason = CAUSES[cause]
    user = personas[watcher]
    run_id = _run_for(personas["alice"])
    client, headers = _session(user) if auth == "session" else (None, _token_headers(user))
    key = Token.objects.filter(user=user).values_list("key", flat=True).first() or ""

    async def scenario() -> None:
        comm = await _open(_stack(cause, app), f"/ws/runs/{run_id}/trace/?after=0", headers)
        while (await comm.receive_json_from(timeout=WAIT_S))["type"] != "replayed":
            pass
        await sync_to_async(_append)(run_id, 1)
        assert (await comm.receive_json_from(timeout=WAIT_S))["type"] == "event"  # live
        await sync_to_async(_end)(cause, user, clock, key, client)
        if path == "doorbell":
            await sync_to_async(_append)(run_id, 2)  # committed after the revocation
        await _closed_without_events(comm, code, reason)
        await sync_to_async(_append)(run_id, 1)
        assert await comm.receive_nothing(timeout=QUIET_S)  # nothing after the close
        await comm.disconnect()

    async_to_sync(scenario)()


# -- the console socket -------------------------------------------------------------------------

CONSOLE_CASES = [
    ("role-removed", "ring", 4403, "ACCESS_REVOKED"),
    ("role-removed", "doorbell", 4403, "ACCESS_REVOKED"),
    ("role-removed", "periodic", 4403, "ACCESS_REVOKED"),
    ("token-revoked", "ring", 4401, "TOKEN_REVOKED"),
    ("token-expired", "doorbell", 4401, "TOKEN_EXPIRED"),
]


@pytest.mark.parametrize(("cause", "path", "code", "reason"), CONSOLE_CASES, indirect=["path"])
def test_console_socket_closes_when_its_credential_or_right_ends(
    personas: dict, app: Any, clock: FakeClock, cause: str, path: str, code: int, reason: str
) -> None:
    operator, alice = personas["operator"], personas["alice"]
    headers = _token_headers(operator)
    key = Token.objects.get(user=operator).key

    async def scenario() -> None:
        comm = await _open(_stack(cause, app), "/ws/console/", headers)
        assert (await comm.receive_json_from(timeout=WAIT_S))["type"] == "queues"
        await sync_to_async(_end)(cause, operator, clock, key, None)
        if path == "doorbell":
            await sync_to_async(_waiting_run)(alice)  # the counts change after the revocation
        await _closed_without_events(comm, code, reason)
        await sync_to_async(_waiting_run)(alice)
        assert await comm.receive_nothing(timeout=QUIET_S)
        await comm.disconnect()

    async_to_sync(scenario)()
