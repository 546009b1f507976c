"""The one rate limiter: a sliding window counter in Django's cache that *reserves* before acting.

Used by the sign-in throttle (``agentconsole/access/auth.py``: failed sign-ins per account and per
address) and by the run-creation rate (``runs/start/limits.py``: runs started per user).

Why reserve first (issue 21 item 5). A limiter that reads the count, lets the action run, and
counts it afterwards lets every request that read the count before the first one finished
through: 80 wrong passwords sent at once all read "0 failures" and 59 were checked. Here a
request takes its place with one atomic increment *before* the guarded action; the increment's
result says whether it fits, so N simultaneous requests get N different counts and at most the
limit of them fit. A request that does not fit hands its place back at once (it was refused,
so it is not counted); one that fits keeps it unless the caller gives it back (a sign-in that
succeeded is not a failure).

Atomicity: ``cache.add`` (set if absent) then ``cache.incr``. On Redis both are single commands
(``SET NX EX``, ``INCRBY``); Django's local-memory cache does each under its lock (one process:
the embedded deployment's single daphne). Several web processes share counts only through Redis.

The window slides: the previous fixed window's count is weighted by how much of it still
overlaps the last ``window_s`` seconds, so the limit cannot be taken twice in a moment at a
window boundary, as a fixed window allows. The accepted imprecision: the weighting assumes the
previous window's places were spread evenly, so places all taken at its very end free up
through the next window rather than a whole window later; in the worst case a span of one
window sees up to about twice the limit, spread over it (the limit on average, over longer
spans). Counts expire two windows after they were started. ``clock`` returns seconds
(``time.time``); tests pass their own, so nothing sleeps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class WindowFull(Exception):
    """No place left in the window; one may be tried again in ``wait`` seconds."""

    def __init__(self, wait: int) -> None:
        super().__init__(f"limit reached; try again in {wait} s")
        self.wait = wait


@dataclass(frozen=True)
class Place:
    """A place taken in one fixed window: the cache key that was incremented."""

    slot: str


@dataclass
class SlidingWindow:
    cache: Any
    clock: Callable[[], float]
    window_s: float

    def take(self, key: str, limit: int) -> Place:
        """Reserve one place under ``key``: raise ``WindowFull`` (holding nothing) if the
        window already holds ``limit``.

        1. Increment this window's count; the result counts every place taken before ours.
        2. Our place fits if the weighted count before it is below the limit (the rule a
           read-then-count limiter applies, now on a count no other request can also read).
        3. If not, give it back and say how long until one would fit.
        """
        now = self.clock()
        index = self._index(now)
        slot = f"{key}:{index}"
        taken = self._incr(slot)
        previous = self.cache.get(f"{key}:{index - 1}", 0)
        elapsed = (now - index * self.window_s) / self.window_s  # 0..1 into this window
        if (taken - 1) + previous * (1 - elapsed) < limit:
            return Place(slot)
        self.give_back(Place(slot))
        # The wait of the window as it stands, without ours. Places that fit never number more
        # than the limit; a count above it is other refused requests' places, held only until
        # they hand them back, and must not lengthen the wait.
        raise WindowFull(self._wait(min(taken - 1, limit), previous, limit, index, now))

    def give_back(self, place: Place) -> None:
        try:
            left = self.cache.decr(place.slot)
        except ValueError:  # cleared or expired meanwhile: nothing left to give back
            return
        if left < 0:
            # Cleared and started again between our take and this: the count we decremented
            # is not the one we incremented. Undo, rather than leave a place too many free.
            self.cache.incr(place.slot)

    def clear(self, key: str) -> None:
        """Forget every place under ``key`` (this window and the previous one)."""
        index = self._index(self.clock())
        self.cache.delete_many([f"{key}:{index}", f"{key}:{index - 1}"])

    def _index(self, now: float) -> int:
        return int(now // self.window_s)

    def _incr(self, slot: str) -> int:
        # Kept while it is the "previous" window too. A slot of this window cannot expire while
        # the window lasts (it was added in it, with twice its length), so incr finds it.
        self.cache.add(slot, 0, math.ceil(2 * self.window_s))
        return int(self.cache.incr(slot))

    def _wait(self, current: int, previous: int, limit: int, index: int, now: float) -> int:
        if current >= limit:
            # Blocked for the rest of this window and until, in the next one, this window's
            # weight falls below the limit: current * (1 - f) < limit.
            until = (index + 1 + (1 - limit / current)) * self.window_s
        elif previous:
            # The previous window's weight falls: current + previous * (1 - f) < limit.
            until = (index + (1 - (limit - current) / previous)) * self.window_s
        else:
            until = now
        # +1 past the instant the estimate reaches the limit exactly (it must fall below it).
        return max(1, math.floor(until - now) + 1)


def parse_rate(rate: str) -> tuple[int, int]:
    """``"30/min"`` -> (30, 60): a count per second, minute, hour or day (the first letter of
    the period counts, as in DRF's rates)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*([smhd])[a-z]*\s*", rate)
    if match is None or int(match.group(1)) < 1:
        raise ImproperlyConfigured(f"a rate is '<n>/<sec|min|hour|day>', not {rate!r}")
    return int(match.group(1)), _PERIODS[match.group(2)]
