"""The run a log line belongs to: a context variable the adapters set while they work on a run
(a Celery task, a websocket consumer) and the project's log filter reads
(agentconsole/ops/logs.py). Here, in the kernel, so that every app may set it."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

# A contextvar, not a thread-local: the websocket consumers are coroutines sharing one thread.
current_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentconsole_run_id", default=None
)


@contextlib.contextmanager
def run_context(run_id: str) -> Iterator[None]:
    token = current_run_id.set(run_id)
    try:
        yield
    finally:
        current_run_id.reset(token)
