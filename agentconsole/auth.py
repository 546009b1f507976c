"""Sign-in throttling and API token lifetime (issue 9 item 8).

Sign-in throttle. Failed sign-ins are counted per account (the user name as typed, case-folded)
and per client address, on the API (POST /api/auth/token/) and on the admin's login page. While
either count is at its limit the sign-in is refused with 429 and Retry-After — also with the right
password, so guessing cannot go on. A success clears the account's count only: one good password
must not clear an address that is guessing many accounts. Counts live in Django's cache (Redis
when REDIS_URL is set, so every web process sees the same counts; per-process memory otherwise,
which is right for the one daphne process of the embedded mode). The window slides: the previous
fixed window's count is weighted by how much of it still overlaps (the "sliding window counter"),
so there is no burst of twice the limit at a window boundary. Per-account limits let anyone lock
an account out for a window by failing on purpose; that is the accepted price of stopping guesses.

Tokens. A token expires AGENTCONSOLE_TOKEN_TTL_S after it was created (an expired one is deleted
on sight and refused with TOKEN_EXPIRED, on the API and on the websocket); a password change
deletes the user's tokens; DELETE /api/auth/token/ revokes the caller's tokens. An open websocket
closes when its token or session ends (agentconsole/ws_auth.py, runs/socket_guard.py).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token


class LoginThrottled(exceptions.Throttled):
    default_code = "login_throttled"  # -> LOGIN_THROTTLED (policy/http.py)

    def __init__(self, wait: int) -> None:
        # Not Throttled.__init__: it appends its own "Expected available in..." sentence.
        exceptions.APIException.__init__(
            self, f"Too many failed sign-ins; try again in {wait} seconds.", self.default_code
        )
        self.wait = wait  # DRF's handler turns it into Retry-After


class TokenExpired(exceptions.AuthenticationFailed):
    default_detail = "Token expired: sign in again for a new one."
    default_code = "token_expired"  # -> TOKEN_EXPIRED


@dataclass
class LoginThrottle:
    """Counts failed sign-ins per account and per address in a sliding window.

    ``clock`` returns seconds (``time.time``); tests pass their own, so nothing sleeps.
    """

    cache: Any
    clock: Callable[[], float]
    window_s: float
    per_account: int
    per_address: int

    def wait(self, username: str, address: str) -> int:
        """Seconds until a sign-in may be tried (0: now)."""
        now = self.clock()
        return max(
            self._wait(self._key("acct", _fold(username)), self.per_account, now),
            self._wait(self._key("addr", address), self.per_address, now),
        )

    def failed(self, username: str, address: str) -> None:
        now = self.clock()
        self._bump(self._key("acct", _fold(username)), now)
        self._bump(self._key("addr", address), now)

    def succeeded(self, username: str) -> None:
        """Clear the account's count (both windows); the address keeps its count."""
        index = self._index(self.clock())
        key = self._key("acct", _fold(username))
        self.cache.delete_many([f"{key}:{index}", f"{key}:{index - 1}"])

    # -- the sliding window counter ---------------------------------------------------------

    def _index(self, now: float) -> int:
        return int(now // self.window_s)

    def _key(self, kind: str, ident: str) -> str:
        # Hashed: a user name is attacker-chosen text, a cache key must be short and plain.
        digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"login-fail:{kind}:{digest}"

    def _bump(self, key: str, now: float) -> None:
        current = f"{key}:{self._index(now)}"
        timeout = math.ceil(2 * self.window_s)  # kept while it is the "previous" window too
        self.cache.add(current, 0, timeout)
        try:
            self.cache.incr(current)
        except ValueError:  # expired between add and incr
            self.cache.set(current, 1, timeout)

    def _wait(self, key: str, limit: int, now: float) -> int:
        index = self._index(now)
        counts = self.cache.get_many([f"{key}:{index}", f"{key}:{index - 1}"])
        current = counts.get(f"{key}:{index}", 0)
        previous = counts.get(f"{key}:{index - 1}", 0)
        elapsed = (now - index * self.window_s) / self.window_s  # 0..1 into this window
        if current + previous * (1 - elapsed) < limit:
            return 0
        if current >= limit:
            # Blocked for the rest of this window and until, in the next one, this window's
            # weight falls below the limit: current * (1 - f) < limit.
            until = (index + 1 + (1 - limit / current)) * self.window_s
        else:
            # The previous window's weight falls: current + previous * (1 - f) < limit.
            until = (index + (1 - (limit - current) / previous)) * self.window_s
        # +1 past the instant the estimate reaches the limit exactly (it must fall below it).
        return max(1, math.floor(until - now) + 1)


def _fold(username: str) -> str:
    return username.strip().casefold()


def login_throttle() -> LoginThrottle:
    return LoginThrottle(
        cache=caches["default"],
        clock=time.time,
        window_s=settings.AGENTCONSOLE_LOGIN_WINDOW_S,
        per_account=settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ACCOUNT,
        per_address=settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ADDRESS,
    )


def client_address(request: HttpRequest | None) -> str:
    """The client's address: REMOTE_ADDR, or behind a proxy the last entry of the header named
    by AGENTCONSOLE_CLIENT_IP_HEADER (the one the nearest proxy added; earlier entries are the
    client's own claim)."""
    if request is None:
        return "unknown"
    header = settings.AGENTCONSOLE_CLIENT_IP_HEADER
    if header:
        value = request.META.get("HTTP_" + header.upper().replace("-", "_"), "")
        last = value.rsplit(",", 1)[-1].strip()
        if last:
            return last
    return request.META.get("REMOTE_ADDR") or "unknown"


def username_of(data: Any) -> str:
    value = data.get("username") if hasattr(data, "get") else None
    return value if isinstance(value, str) else ""


# --- signals (connected in agentconsole/apps.py) ---------------------------------------------


def on_login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kw: Any):
    """Every failed ``authenticate()`` (API token view, admin login) counts."""
    username = credentials.get("username")
    login_throttle().failed(username if isinstance(username, str) else "", client_address(request))


def on_logged_in(sender: Any, request: Any, user: Any, **kw: Any) -> None:
    login_throttle().succeeded(user.get_username())


def on_user_saved(sender: Any, instance: Any, update_fields: Any = None, **kw: Any) -> None:
    """pre_save of the user model: a changed password hash deletes the user's API tokens, so a
    stolen token dies with the old password. (A hash upgraded on sign-in counts as a change.)"""
    if instance.pk is None or (update_fields is not None and "password" not in update_fields):
        return
    stored = type(instance).objects.filter(pk=instance.pk).values_list("password", flat=True)
    if stored.first() not in (None, instance.password):
        Token.objects.filter(user_id=instance.pk).delete()


# --- tokens ----------------------------------------------------------------------------------


def token_expires_at(token: Any) -> datetime:
    return token.created + timedelta(seconds=settings.AGENTCONSOLE_TOKEN_TTL_S)


def token_expired(token: Any, now: datetime | None = None) -> bool:
    """``now``: an open websocket asks with its own clock (agentconsole/ws_auth.py)."""
    return token_expires_at(token) <= (now or timezone.now())


def token_for(user: Any) -> Any:
    """The user's token, a new one when there is none or it expired."""
    token, created = Token.objects.get_or_create(user=user)
    if not created and token_expired(token):
        token.delete()
        token = Token.objects.create(user=user)
    return token


def live_token(key: str) -> Any | None:
    """The token, with its user, if it is live and its user active (None otherwise; an expired
    token is deleted). The websocket path (agentconsole/ws_auth.py) uses this; the API uses the
    class below."""
    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return None
    if token_expired(token):
        token.delete()
        return None
    return token


class ExpiringTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user, token = super().authenticate_credentials(key)
        if token_expired(token):
            token.delete()
            raise TokenExpired()
        return user, token
