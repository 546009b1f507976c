"""Websocket authentication: the session cookie (browsers) or a DRF token (scripts).

Origin rule (issue 9 item 13): a socket that presents an Origin header is accepted only if that
Origin is exactly the socket's own origin — scheme (ws→http, wss→https, or https when
SECURE_PROXY_SSL_HEADER says so), host and port from its Host header, the Host being one of
ALLOWED_HOSTS — or exactly one of CSRF_TRUSTED_ORIGINS: the rule Django's CSRF check applies to an
HTTP POST, so a page that may not POST may not open a socket on the user's session cookie either.
(Django's CSRF also accepts a wildcard subdomain entry such as https://*.example.com; a socket does
not: entries are compared exactly.) A socket without an Origin may authenticate only with a token;
its session cookie is ignored.

Either way the scope also gets a ``credential``: how the socket was authenticated (the token's
key and expiry, or the session's key; the user's id), which the socket asks again while it is
open and closes when it no longer holds (issue 21 item 6, runs/web/socket_guard.py). Its clock is
the application's (agentconsole/asgi.py): tests pass one they move by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.contrib.auth.models import AnonymousUser
from django.http.request import split_domain_port, validate_host
from django.utils.crypto import constant_time_compare
from rest_framework.authtoken.models import Token

from agentconsole.access.auth import live_token, token_expired, token_expires_at
from runs.domain.clock import SYSTEM_CLOCK, Clock, as_datetime
from runs.web.socket_guard import SESSION_ENDED, TOKEN_EXPIRED, TOKEN_REVOKED, USER_INACTIVE


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@dataclass(frozen=True)
class SocketCredential:
    """How a socket was authenticated, to be asked again while it is open (the consumer's
    reader threads call ``current_user``). A session's expiry is not kept: the session store
    decides it on every read, as for a request (a request may have extended it since)."""

    kind: str  # "token" or "session"
    key: str = field(repr=False)  # a secret: never in a log line
    user_id: Any
    expires_at: datetime | None = None  # a token's
    clock: Clock = field(default=SYSTEM_CLOCK, compare=False, repr=False)

    def current_user(self) -> tuple[Any, str]:
        """(the user, read afresh, "") while this still signs them in, else (None, reason)."""
        if self.kind == "token":
            return self._token_user()
        return self._session_user()

    def _token_user(self) -> tuple[Any, str]:
        now = as_datetime(self.clock.now_ms())
        if self.expires_at is not None and self.expires_at <= now:
            return None, TOKEN_EXPIRED
        token = Token.objects.select_related("user").filter(key=self.key).first()
        # Deleted: revoked, or the password changed (agentconsole/access/auth.py). Not deleted here
        # when expired: the API deletes an expired token on sight, a socket only stops.
        if token is None or token.user_id != self.user_id:
            return None, TOKEN_REVOKED
        if token_expired(token, now):
            return None, TOKEN_EXPIRED
        if not token.user.is_active:
            return None, USER_INACTIVE
        return token.user, ""

    def _session_user(self) -> tuple[Any, str]:
        # Django's rule for a request (django.contrib.auth.get_user: the session is live and
        # names this user and an allowed backend, which finds them active, and the auth hash
        # matches the password's), but read-only: get_user flushes or cycles the session on a
        # mismatch, which a socket must not do to the browser whose cookie it cannot update.
        data = import_module(settings.SESSION_ENGINE).SessionStore(self.key).load()
        backend, user = data.get(BACKEND_SESSION_KEY), None
        if (
            str(data.get(SESSION_KEY)) == str(self.user_id)
            and backend in settings.AUTHENTICATION_BACKENDS
        ):
            user = load_backend(backend).get_user(self.user_id)
        if user is not None and _hash_holds(data.get(HASH_SESSION_KEY), user):
            return user, ""
        row = get_user_model()._default_manager.filter(pk=self.user_id).first()
        if row is None or not row.is_active:
            return None, USER_INACTIVE
        return None, SESSION_ENDED


def _hash_holds(stored: Any, user: Any) -> bool:
    """The session's auth hash is the user's (or one under a SECRET_KEY_FALLBACKS key)."""
    if not stored or not hasattr(user, "get_session_auth_hash"):
        return False
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return any(constant_time_compare(stored, h) for h in hashes)


@database_sync_to_async
def _authenticate_token(key: str, clock: Clock) -> tuple[Any, SocketCredential | None]:
    """The same rule as the API: an expired token is refused (and deleted)."""
    token = live_token(key)
    if token is None:
        return AnonymousUser(), None
    expires_at = token_expires_at(token)
    return token.user, SocketCredential("token", key, token.user_id, expires_at, clock)


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


class _SessionCredential:
    """Inside Channels' session and auth middleware: records which session signed the user in."""

    def __init__(self, app: Any, clock: Clock) -> None:
        self.app = app
        self.clock = clock

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        user, session = scope.get("user"), scope.get("session")
        if user is not None and user.is_authenticated and session is not None:
            credential = SocketCredential("session", session.session_key, user.pk, None, self.clock)
            scope = {**scope, "credential": credential}
        return await self.app(scope, receive, send)


class TokenOrSessionAuth:
    def __init__(self, app: Any, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.app = app
        self.clock = clock
        self.session_app = AuthMiddlewareStack(_SessionCredential(app, clock))

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
            user, credential = await _authenticate_token(token, self.clock)
            return await self.app({**scope, "user": user, "credential": credential}, receive, send)
        if origin is None:
            return await self.app({**scope, "user": AnonymousUser()}, receive, send)
        return await self.session_app(scope, receive, send)
