"""Running a coroutine to the end from a test, whatever loop the main thread already runs.

After the browser tests, Playwright's sync API leaves an event loop running on the test
process's main thread, and ``asyncio.run`` refuses to start another there. A loop of its own in
a thread of the test's does not care.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

WAIT_S = 120  # a bound on a hung coroutine, not a speed claim


def run_in_own_loop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(make())`` in a thread of its own; its result, or its exception raised."""
    results: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            results.append(asyncio.run(make()))
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    runner = threading.Thread(target=target)
    runner.start()
    runner.join(timeout=WAIT_S)
    if errors:
        raise errors[0]
    if not results:
        raise TimeoutError(f"the coroutine did not finish within {WAIT_S} s")
    return results[0]
