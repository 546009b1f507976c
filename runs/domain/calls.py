"""Calls a run waits on, made outside the worker (issue 22): the step splits at the model call.

A worker that reaches a model planner's step does not call the model. It builds the request
(pure: ``ModelRequest``), commits it with the run (intent before effect: the request and its hash
are durable before anything is sent) and lets go of the run. The gateway process
(``runs.waiting``), built for waiting, sends it, records the reply, and sends the run back to a
worker, which takes the step from the recorded reply. While the model thinks, the run holds no
worker process, no database connection and no transaction.

A call's life (``CallStatus``)::

    queued ──claim──▶ sending ──reply──▶ answered ──the step takes it──▶ consumed
       ▲                 │ └──no retry left──▶ failed ──the step takes it──▶ consumed
       └──retry later────┘      (429, 5xx, timeout: queued again, not before ``not_before``)
    queued | sending ──the run stops or is cancelling──▶ abandoned

A gateway that dies leaves ``sending`` with a lease that lapses; another claim of that call is a
new attempt (at most one per lease, each recorded). A reply once recorded is never asked for
again: the step reads it, however often the run's worker dies before it commits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from policy.domain import canonical as hashing


class CallStatus(enum.StrEnum):
    QUEUED = "queued"
    SENDING = "sending"
    ANSWERED = "answered"
    FAILED = "failed"
    CONSUMED = "consumed"
    ABANDONED = "abandoned"


# Not yet answered: the run waits, the gateway owes it a reply (or an attempt).
OPEN = (CallStatus.QUEUED, CallStatus.SENDING)
# Answered or failed for good, not yet taken by a step: the run is owed a worker.
SETTLED = (CallStatus.ANSWERED, CallStatus.FAILED)


def call_id(run_id: str, step: int) -> str:
    """One model call per planner step: the step number names it (a retried step, a worker
    that died before its commit, finds the call it already recorded)."""
    return f"{run_id}:s{step}"


def request_hash(body: dict[str, Any]) -> str:
    """The hash of exactly what is sent (canonical JSON, the house's hash scheme)."""
    return hashing.content_hash(body)


@dataclass(frozen=True)
class ModelRequest:
    """What a model planner's step asks, built from the planner's bounded context.

    ``body`` is the chat-completions request as sent (never an API key: the gateway adds it
    from settings); ``hints`` is what reading the reply needs that the reply does not carry
    (the offered tools' versions, the observation ids the model saw); ``summary`` goes into the
    step's ``planner.output`` event (sizes and names, never content)."""

    endpoint: str
    model: str
    body: dict[str, Any]
    deadline_ms: int
    hints: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def request_hash(self) -> str:
        return request_hash(self.body)


@dataclass(frozen=True)
class CallRecord:
    """A recorded call as the step sees it: its status, and once settled, the reply or the
    failure. ``attempts`` counts the sends (a lost one included)."""

    call_id: str
    status: CallStatus
    hints: dict[str, Any]
    summary: dict[str, Any]
    reply: Any = None
    failure: dict[str, Any] | None = None
    attempts: int = 0
