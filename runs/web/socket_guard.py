"""An open socket does not outlive what let it open (issue 21 item 6).

A socket is authenticated once, at connect (agentconsole/access/ws_auth.py), which leaves in the
scope how: a ``credential`` (a token's key and expiry, or a session's key; the user's id) that can
be asked again whether it still signs that user in. The socket closes once it does not (the token
was revoked or expired, the session ended — signed out, expired, or the password changed —, the
user was deactivated) or once the user may no longer watch what the socket shows (a role
removed, the run no longer theirs to see). It checks again:

1. before it sends what it read (a doorbell's events, changed queue counts). The check starts
   after the read finished, so it sees every revocation committed before anything it would
   send: nothing committed after a revocation reaches the socket, lost rings or not;
2. at once when the user's doorbell rings (``runs.engine.doorbell.ring_user``, rung after commit by
   agentconsole/access/ws_revoke.py when a token or session is deleted, or a password, active flag
   or role changes): closing is near-immediate;
3. every ``AGENTCONSOLE_WS_RECHECK_S`` seconds: the bound when that ring is lost (the in-memory
   layer across processes, a Redis hiccup, ``changepassword`` run elsewhere) and for what nobody
   rings: a token or session that expires.

Close codes: 4401 (the credential ended; reason TOKEN_REVOKED, TOKEN_EXPIRED, SESSION_ENDED or
USER_INACTIVE) and 4403 (ACCESS_REVOKED). The last frame before the close says the same,
``{"type": "closed", "code", "message"}``: daphne drops a close frame's reason. A check that
cannot run (the database is away) closes with 1011: clients reconnect and are authenticated
anew.

Sockets with one credential watching one thing share their checks as they share their reads
(runs/consumers.py): a socket joins a check in flight only if it started after its own read.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError, connection

from runs.engine.doorbell import user_group

# Accepted sockets of this web process, by kind (the /metrics gauge; agentconsole/ops/metrics.py).
# One event loop per daphne process runs every consumer, so plain integers need no lock. Kept
# here, not in runs.consumers: the metrics read it, and the consumers import the composition
# root (the queue's live list reads the tool registry), which imports the metrics.
_open_clients = {"trace": 0, "console": 0}


def open_clients() -> dict[str, int]:
    return dict(_open_clients)


log = logging.getLogger(__name__)

NOT_AUTHENTICATED, PERMISSION_DENIED = 4401, 4403
CHECK_FAILED = 1011  # the server could not check: not a refusal, the client reconnects

TOKEN_REVOKED, TOKEN_EXPIRED = "TOKEN_REVOKED", "TOKEN_EXPIRED"
SESSION_ENDED, USER_INACTIVE = "SESSION_ENDED", "USER_INACTIVE"
ACCESS_REVOKED = "ACCESS_REVOKED"
MESSAGES = {
    TOKEN_REVOKED: "The token was revoked: sign in again.",
    TOKEN_EXPIRED: "The token expired: sign in again.",
    SESSION_ENDED: "The session ended: sign in again.",
    USER_INACTIVE: "The account is deactivated.",
    ACCESS_REVOKED: "You may no longer watch this.",
}

Verdict = tuple[int, str] | None  # None: still allowed; else (close code, reason)


class Credential(Protocol):
    """How a socket was authenticated (agentconsole/access/ws_auth.py). Hashable: equal credentials
    share checks."""

    user_id: Any

    def __hash__(self) -> int: ...

    def current_user(self) -> tuple[Any, str]:
        """(the user, "") while it signs them in, else (None, reason). Reads the database."""
        ...


def verdict(credential: Credential, may_watch: Callable[[Any], bool]) -> Verdict:
    """Does the credential still sign its user in, and may that user (read afresh) still watch?
    Blocking: runs in a reader thread."""
    try:
        user, reason = credential.current_user()
        if user is None:
            return NOT_AUTHENTICATED, reason
        return None if may_watch(user) else (PERMISSION_DENIED, ACCESS_REVOKED)
    except DatabaseError:
        connection.close()  # as the trace reads: a broken connection is not kept
        raise


# Checks in flight, by (credential, what is watched), with the serial they started under.
_started = 0
_checking: dict[Hashable, tuple[int, asyncio.Future[Verdict]]] = {}


def checks_started() -> int:
    """Take this after a read: a check with a higher serial started after the read finished."""
    return _started


async def _shared(key: Hashable, start: Callable[[], Any], *, after: int) -> Verdict:
    global _started
    entry = _checking.get(key)
    if entry is None or entry[0] <= after:
        _started += 1
        check = asyncio.ensure_future(start())
        entry = (_started, check)
        _checking[key] = entry

        def done(_: Any, key: Hashable = key, check: Any = check) -> None:
            if _checking.get(key, (0, None))[1] is check:
                del _checking[key]

        check.add_done_callback(done)
    # Shielded: one socket going away does not cancel the check the others wait for.
    return await asyncio.shield(entry[1])


class GuardedSocket(AsyncJsonWebsocketConsumer):
    """A consumer that closes when its credential or its user's right ends. Subclasses say
    what is watched, who may watch it, and which threads run the check."""

    ended = False  # closed by the guard: nothing more is sent
    guard_task: asyncio.Task[None] | None = None
    guarded_group: str | None = None

    def watched(self) -> Hashable:
        raise NotImplementedError

    def may_watch(self, user: Any) -> bool:
        """Blocking (a reader thread); ``user`` is read afresh, roles included."""
        raise NotImplementedError

    async def in_thread(self, fn: Callable[[], Verdict]) -> Verdict:
        raise NotImplementedError

    async def open_guard(self) -> Verdict:
        """At connect, before accept: listen to the user's doorbell, then check. A revocation
        committed after the check rings that doorbell; one committed before, the check sees."""
        credential = self.scope.get("credential")
        if credential is None:  # not authenticated by agentconsole/access/ws_auth.py: fail closed
            return NOT_AUTHENTICATED, ""
        self.guarded_group = user_group(credential.user_id)
        await self.channel_layer.group_add(self.guarded_group, self.channel_name)
        return await self._check(after=checks_started())

    def start_guard(self) -> None:
        """After accept: the periodic check, the bound when no ring comes."""
        self.guard_task = asyncio.create_task(self._recheck(settings.AGENTCONSOLE_WS_RECHECK_S))

    async def close_guard(self) -> None:
        """In disconnect."""
        task, self.guard_task = self.guard_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.guarded_group is not None:
            await self.channel_layer.group_discard(self.guarded_group, self.channel_name)
            self.guarded_group = None

    async def still_allowed(self, *, after: int) -> bool:
        """False once the socket is closed (by this check or an earlier one)."""
        if self.ended:
            return False
        try:
            found = await self._check(after=after)
        except Exception as exc:  # fail closed: a socket that cannot be checked does not stay
            log.warning("socket check failed: %s", type(exc).__name__)
            found = (CHECK_FAILED, "")
        if found is None:
            return True
        await self._end(*found)
        return False

    async def auth_changed(self, message: dict[str, Any]) -> None:
        """The user's doorbell (runs.engine.doorbell.ring_user): check now, not at the next tick."""
        await self.still_allowed(after=checks_started())

    async def _check(self, *, after: int) -> Verdict:
        credential = self.scope["credential"]
        fn = functools.partial(verdict, credential, self.may_watch)
        return await _shared((credential, self.watched()), lambda: self.in_thread(fn), after=after)

    async def _end(self, code: int, reason: str) -> None:
        if self.ended:  # two checks found it at once: one close
            return
        self.ended = True  # first, before any await: no send path passes its check after this
        if reason:
            await self.send_json({"type": "closed", "code": reason, "message": MESSAGES[reason]})
        await self.close(code=code, reason=reason or None)

    async def _recheck(self, seconds: float) -> None:
        while not self.ended:
            await asyncio.sleep(seconds)
            await self.still_allowed(after=checks_started())
