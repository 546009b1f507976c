"""Websocket authentication: the session cookie (browsers) or a DRF token (scripts).

Origin rule (issue 9 item 13): a socket that presents an Origin header is accepted only if that
Origin is exactly the socket's own origin — scheme (ws→http, wss→https, or https when
SECURE_PROXY_SSL_HEADER says so), host and port from its Host header, the Host being one of
ALLOWED_HOSTS — or exactly one of CSRF_TRUSTED_ORIGINS: the rule Django's CSRF check applies to an
HTTP POST, so a page that may not POST may not open a socket on the user's session cookie either.
(Django's CSRF also accepts a wildcard subdomain entry such as https://*.example.com; a socket does
not: entries are compared exactly.) A socket without an Origin may authenticate only with a token;
its session cookie is ignored.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import split_domain_port, validate_host

from agentconsole.auth import user_for_token


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@database_sync_to_async
def _user_for_token(key: str) -> Any:
    """The same rule as the API: an expired token is refused (and deleted)."""
    return user_for_token(key) or AnonymousUser()


def _is_secure(scope: dict[str, Any]) -> bool:
    """As ``HttpRequest.is_secure()``: wss, or the TLS proxy's header when one is configured."""
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if not proxy:
        return False
    meta_name, secure_value = proxy
    # "HTTP_X_FORWARDED_PROTO" -> b"x-forwarded-proto"
    name = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
    value = _header(scope, name)
    return value is not None and value.split(",", 1)[0].strip() == secure_value


def origin_allowed(scope: dict[str, Any], origin: str) -> bool:
    """The socket's own origin (as Django's CSRF computes it for a request) or a trusted one."""
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    host = _header(scope, b"host")
    if not host:
        return False
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    return origin == f"{'https' if _is_secure(scope) else 'http'}://{host}"


class TokenOrSessionAuth:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.session_app = AuthMiddlewareStack(app)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        origin = _header(scope, b"origin")
        if origin is not None and not origin_allowed(scope, origin):
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
