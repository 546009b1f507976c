"""Time as an input (STYLE habit 11): the one place that reads the wall clock.

Everything that decides a deadline, a lease or an expiry asks a ``Clock`` it was given instead
of calling ``time.time()``, so tests advance a fake clock instead of sleeping for real time.
No Django here: the domain and the Django side both import it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch, UTC."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)


SYSTEM_CLOCK = SystemClock()


def as_datetime(ms: int) -> datetime:
    """An aware UTC datetime for a clock reading (lease and expiry columns are datetimes)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
