"""issue 9 item 8: the websocket applies the API's token lifetime."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agentconsole.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_expired_token_cannot_open_a_socket(personas, settings) -> None:
    settings.AGENTCONSOLE_TOKEN_TTL_S = 3600
    token = Token.objects.create(user=personas["operator"])

    async def connect() -> tuple[bool, int | None]:
        headers = [(b"authorization", f"Token {token.key}".encode())]
        comm = WebsocketCommunicator(application, "/ws/console/", headers=headers)
        result = await comm.connect(timeout=5)
        if result[0]:
            await comm.disconnect()
        return result

    assert async_to_sync(connect)()[0]
    Token.objects.filter(pk=token.pk).update(created=timezone.now() - timedelta(seconds=3600))
    assert async_to_sync(connect)() == (False, 4401)
    assert not Token.objects.filter(pk=token.pk).exists()
