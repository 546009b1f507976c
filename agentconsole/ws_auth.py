"""Websocket authentication: the session cookie (browsers) or a DRF token (scripts).

Origin rule: a socket that presents an Origin header must come from an allowed host (so a
foreign page cannot ride a user's session cookie); a socket without one may authenticate only
with a token — its session cookie is ignored.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import validate_host


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@database_sync_to_async
def _user_for_token(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class TokenOrSessionAuth:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.session_app = AuthMiddlewareStack(app)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        origin = _header(scope, b"origin")
        if origin is not None:
            host = urlparse(origin).hostname or ""
            if not validate_host(host, settings.ALLOWED_HOSTS):
                return await WebsocketDenier.as_asgi()(scope, receive, send)
        token = None
        auth = _header(scope, b"authorization")
        if auth and auth.lower().startswith("token "):
            token = auth[6:].strip()
        if token is None:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            token = (query.get("token") or [None])[-1]
        if token:
            scope = {**scope, "user": await _user_for_token(token)}
            return await self.app(scope, receive, send)
        if origin is None:
            return await self.app({**scope, "user": AnonymousUser()}, receive, send)
        return await self.session_app(scope, receive, send)
