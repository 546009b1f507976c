"""issue 9 item 9: a websocket to a path no route matches is closed cleanly (4404), not a
ValueError from URLRouter and a traceback in the server log."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from agentconsole.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "path", ["/ws/nope/", "/", "/ws/runs/", "/ws/runs/x/trace/extra/", "/api/runs/", "/ws/%00/"]
)
def test_an_unknown_socket_path_is_closed_with_4404(path: str, personas) -> None:
    async def scenario() -> tuple[bool, int | None]:
        comm = WebsocketCommunicator(application, path)
        return await comm.connect(timeout=5)

    assert async_to_sync(scenario)() == (False, 4404)
