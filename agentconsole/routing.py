"""Websocket routes of the whole project."""

from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import path, re_path

from runs.consumers import ConsoleConsumer, RunTraceConsumer


class NoSuchSocket(AsyncWebsocketConsumer):
    """Any other path: a clean close with 4404 (as an unknown run), not URLRouter's ValueError
    and a traceback in the server log (issue 9 item 9)."""

    async def connect(self) -> None:
        await self.close(code=4404)

    async def receive(self, text_data: Any = None, bytes_data: Any = None) -> None:
        return None  # pragma: no cover - never accepted


websocket_urlpatterns = [
    path("ws/runs/<str:run_id>/trace/", RunTraceConsumer.as_asgi()),
    path("ws/console/", ConsoleConsumer.as_asgi()),
    # Last: everything the routes above do not match.
    re_path(r"", NoSuchSocket.as_asgi()),
]
