"""Sign-in throttling and API token lifetime (issue 9 item 8; issue 21 items 4 and 5).

Sign-in throttle: one implementation, in the authentication backend. Every door that signs a
person in (the console's /login/, the admin's /admin/login/, the API's POST /api/auth/token/)
calls ``django.contrib.auth.authenticate``, and ``AUTHENTICATION_BACKENDS`` names only
``ThrottledModelBackend``, which for each attempt:

1. normalises the user name once, with ``normalize_username`` (exactly what Django's sign-in form
   does: strip, then the user model's NFKC), and uses that one name both to look the user up and
   to count: ``\uff56\uff49\uff43\uff54\uff49\uff4d\uff12`` (fullwidth) is ``victim2`` for
   both, so a spelling can neither sign in uncounted nor dodge the count (item 4);
2. reserves the attempt, per account and per client address, with an atomic increment
   (``agentconsole/kernel/ratelimit.py``) *before* the password is checked. An attempt that does not
   fit raises ``LoginThrottled``: 429 with Retry-After on every door, also with the right password,
   so guessing cannot go on. Simultaneous guesses each get their own count, so at most the limit
   of them reach the password check (item 5; before, 59 of 80 simultaneous guesses did);
3. checks the password (Django's ``ModelBackend``);
4. on success clears the account's count and hands the address its place back (a success is
   not a failure, and one good password must not clear an address that guesses many accounts);
   a failure keeps both places: they are the failure count.

The account is counted under the normalised name case-folded: that only ever merges spellings
that sign in as one account (the lookup is exact), so "ALICE" and "alice" share one count
rather than getting 5 guesses each. Counts live in Django's cache: Redis when REDIS_URL is set,
so every web process sees the same counts; per-process memory otherwise, which is right for the
one daphne process of the embedded mode. Per-account limits let anyone lock an account out for a
window by failing on purpose; that is the accepted price of stopping guesses.

Why not django-axes (weighed for issue 21; 8.3 read): it checks for a lockout in its backend
*before* authentication but records the failure in a ``user_login_failed`` signal *after* the
password check, so simultaneous guesses all pass the check-then-count, the defect of item 5. It
also has one failure limit for every lockout parameter (not 5 per account and 20 per address),
a cool-off that restarts rather than a sliding window, keys the name as typed unless
``AXES_USERNAME_CALLABLE`` is set, and brings models, migrations and a middleware. The limiter
here is ~100 lines and shared with the run-creation rate (``runs/start/limits.py``).

Tokens. A token expires AGENTCONSOLE_TOKEN_TTL_S after it was created (an expired one is deleted
on sight and refused with TOKEN_EXPIRED, on the API and on the websocket); a password change
deletes the user's tokens; DELETE /api/auth/token/ revokes the caller's tokens. An open websocket
closes when its token or session ends (agentconsole/access/ws_auth.py, runs/web/socket_guard.py).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.cache import caches
from django.http import HttpRequest, HttpResponseBase
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from agentconsole.kernel.pages import page_error
from agentconsole.kernel.ratelimit import Place, SlidingWindow, WindowFull


class LoginThrottled(exceptions.Throttled):
    default_code = "login_throttled"  # -> LOGIN_THROTTLED (agentconsole/kernel/http.py)

    def __init__(self, wait: int) -> None:
        # Not Throttled.__init__: it appends its own "Expected available in..." sentence.
        exceptions.APIException.__init__(
            self,
            f"Too many failed sign-ins for this account or from this address. "
            f"Try again in {wait} seconds.",
            self.default_code,
        )
        self.wait = wait  # DRF's handler turns it into Retry-After


class TokenExpired(exceptions.AuthenticationFailed):
    default_detail = "Token expired: sign in again for a new one."
    default_code = "token_expired"  # -> TOKEN_EXPIRED


def normalize_username(raw: str) -> str:
    """The one normalisation of a typed user name, for the lookup and the count alike.

    What Django's ``AuthenticationForm`` hands to ``authenticate``: its ``UsernameField`` strips
    (``CharField``) and then applies NFKC (``AbstractBaseUser.normalize_username``, which also
    normalises names when users are created), except above the field's length, where it leaves
    the name alone (it cannot match a user; NFKC of a long text is slow). Applied again by the
    backend on every door, so the API, whose serializer only strips, signs in the same names."""
    name = raw.strip()
    user_model = get_user_model()
    field = user_model._meta.get_field(user_model.USERNAME_FIELD)
    max_length = getattr(field, "max_length", None) or 254
    if len(name) > max_length:
        return name
    return str(user_model.normalize_username(name))


@dataclass
class Attempt:
    """A sign-in attempt that holds its places in the account's and the address's counts."""

    window: SlidingWindow
    account: str
    address: Place

    def succeeded(self) -> None:
        self.window.clear(self.account)
        self.window.give_back(self.address)


@dataclass
class LoginThrottle:
    """Sign-in attempts per account and per address, reserved before the password is checked.

    ``clock`` returns seconds (``time.time``); tests pass their own, so nothing sleeps.
    """

    cache: Any
    clock: Callable[[], float]
    window_s: float
    per_account: int
    per_address: int

    def reserve(self, username: str, address: str) -> Attempt:
        """Take a place for ``username`` (already normalised) from ``address``; raise
        ``LoginThrottled`` holding none if either count is full."""
        window = SlidingWindow(cache=self.cache, clock=self.clock, window_s=self.window_s)
        account = _key("acct", username.casefold())
        try:
            held = window.take(account, self.per_account)
        except WindowFull as full:
            raise LoginThrottled(full.wait) from None
        try:
            place = window.take(_key("addr", address), self.per_address)
        except WindowFull as full:
            window.give_back(held)
            raise LoginThrottled(full.wait) from None
        return Attempt(window=window, account=account, address=place)


def _key(kind: str, ident: str) -> str:
    # Hashed: a user name is attacker-chosen text, a cache key must be short and plain.
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"login-fail:{kind}:{digest}"


def login_throttle() -> LoginThrottle:
    return LoginThrottle(
        cache=caches["default"],
        clock=time.time,
        window_s=settings.AGENTCONSOLE_LOGIN_WINDOW_S,
        per_account=settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ACCOUNT,
        per_address=settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ADDRESS,
    )


class ThrottledModelBackend(ModelBackend):
    """Django's ModelBackend behind the sign-in throttle (the module docstring's steps 1-4)."""

    def authenticate(
        self, request: Any, username: Any = None, password: Any = None, **kwargs: Any
    ) -> Any:
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if not isinstance(username, str) or password is None:
            return None  # nothing that could sign in, so no password is checked
        name = normalize_username(username)
        attempt = login_throttle().reserve(name, client_address(request))
        user = super().authenticate(request, username=name, password=password)
        if user is not None:
            attempt.succeeded()
        return user

    async def aauthenticate(
        self, request: Any, username: Any = None, password: Any = None, **kwargs: Any
    ) -> Any:
        # The same path (the cache calls are synchronous): no door skips the throttle.
        return await sync_to_async(self.authenticate)(
            request, username=username, password=password, **kwargs
        )


def sign_in_page(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """An HTML sign-in view (/login/, /admin/login/): a throttled attempt is the console's error
    page, 429 with Retry-After (the API's view gets the same from DRF's handler)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return view(request, *args, **kwargs)
        except LoginThrottled as exc:
            response = page_error(request, "LOGIN_THROTTLED", str(exc.detail), status=429)
            response["Retry-After"] = str(exc.wait)
            return response

    return wrapped


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


# --- signals (connected in agentconsole/apps.py) ---------------------------------------------


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
    """``now``: an open websocket asks with its own clock (agentconsole/access/ws_auth.py)."""
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
    token is deleted). The websocket path (agentconsole/access/ws_auth.py) uses this; the API uses
    the class below."""
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
