"""A clock a test moves by hand (``runs.domain.clock.Clock``): deadline, lease and expiry tests
advance it instead of sleeping for real time."""

from __future__ import annotations

from runs.domain.clock import SYSTEM_CLOCK


class FakeClock:
    """Starts at the wall clock (rows written by code that still reads the real time stay
    comparable) and moves only when told."""

    def __init__(self, start_ms: int | None = None) -> None:
        self.ms = SYSTEM_CLOCK.now_ms() if start_ms is None else start_ms

    def now_ms(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms

    def set(self, ms: int) -> None:
        self.ms = ms


class AheadClock:
    """The wall clock moved by a fixed offset: for code that also reads the real time (a run
    created through a management command) when only the decision must see a later moment."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return SYSTEM_CLOCK.now_ms() + self.offset_ms
