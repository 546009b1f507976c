"""Calls a run waits on, made outside the worker (issue 22): the step splits at the model call,
and at an MCP tool's call.

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

A tool call (``CallKind.TOOL``, item 4) is the same record for a command whose contract can
wait (``ToolContract.waiting``: an MCP tool). Its ledger intent commits first, with the
request in the same commit; the gateway makes the call and records the outcome; the next
step takes it through the executor's checks and ``settle``, as if the worker had made it.
Where a crash leaves it is the ledger's rule (``runs.engine.executor``, ``recover``): the gateway
marks the call ``sent`` before ``tools/call`` goes out, so a call never sent is sent again,
a sent read or idempotent write is sent again under its token, and any other sent write is
``unknown`` (a person looks). One call per attempt of a command: a retry is a new call.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from policy.domain import canonical as hashing
from policy.domain.contracts import SideEffect, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.outcomes import ToolOutcome


class CallStatus(enum.StrEnum):
    QUEUED = "queued"
    SENDING = "sending"
    ANSWERED = "answered"
    FAILED = "failed"
    CONSUMED = "consumed"
    ABANDONED = "abandoned"


class CallKind(enum.StrEnum):
    MODEL = "model"  # a model planner's request (``ModelRequest``)
    TOOL = "tool"  # a command's call of a tool that only waits (``ToolRequest``)


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


def tool_call_id(run_id: str, token: str, attempt: int) -> str:
    """One tool call per attempt of a command (the token's head names the command in its run:
    96 bits, where a run holds a few hundred commands at most)."""
    return f"{run_id}:t{token[:24]}:{attempt}"


@dataclass(frozen=True)
class ToolRequest:
    """The call of a command the gate issued, for the gateway: the exact arguments the gate
    checked (never masked ones), the token, the effective deadline; ``replayable`` says
    whether a send the gateway lost may be sent again (a read or an idempotent write: the
    rule of ``runs.engine.executor``'s recovery). Secrets are not here: the gateway adds them."""

    lane: str
    tool: str
    version: str
    arguments: dict[str, Any]
    token: str
    attempt: int
    deadline_ms: int
    replayable: bool
    proposal_id: str
    confirmation_id: str | None
    step: int
    not_before_ms: int = 0  # a retry's backoff (0: at once)
    # The W3C trace context of the step that recorded the call (empty when nothing is traced):
    # the gateway sends it on, so the server's spans join the run's trace.
    trace: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        command: ExecutableCommand,
        contract: ToolContract,
        *,
        lane: str,
        attempt: int,
        step: int,
        not_before_ms: int = 0,
        trace: dict[str, str] | None = None,
    ) -> ToolRequest:
        return cls(
            lane=lane,
            tool=command.tool_name,
            version=command.tool_version,
            arguments=dict(command.validated_arguments),
            token=command.idempotency_token,
            attempt=attempt,
            deadline_ms=command.deadline_ms,
            replayable=contract.side_effect in (SideEffect.READ, SideEffect.IDEMPOTENT_WRITE),
            proposal_id=command.proposal_id,
            confirmation_id=command.confirmation_id,
            step=step,
            not_before_ms=not_before_ms,
            trace=dict(trace or {}),
        )

    def body(self) -> dict[str, Any]:
        """What is recorded (and hashed) as the call's request."""
        return ({"trace": self.trace} if self.trace else {}) | {
            "tool": self.tool,
            "version": self.version,
            "arguments": self.arguments,
            "token": self.token,
            "attempt": self.attempt,
            "replayable": self.replayable,
            "proposal_id": self.proposal_id,
            "confirmation_id": self.confirmation_id,
            "step": self.step,
        }


def tool_reply(outcome: ToolOutcome, duration_ms: int) -> dict[str, Any]:
    """How the gateway records a tool call's outcome (the call's ``reply``)."""
    return {"outcome": outcome.model_dump(mode="json"), "duration_ms": duration_ms}


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
    sent: bool = False  # a tool call: ``tools/call`` went out at least once


def recorded_outcome(call: CallRecord, *, read_only: bool) -> tuple[ToolOutcome, int]:
    """What a tool call came to, as the step takes it: (outcome, duration in ms).

    Answered: the recorded outcome. Otherwise the run let go of the call (it is stopping) and
    the outcome says what may have happened, as the executor's cancel would: never sent, no
    effect; sent, a read had none; sent, a write may have had one (``unknown``)."""
    reply = call.reply if isinstance(call.reply, dict) else {}
    if call.status in SETTLED and isinstance(reply.get("outcome"), dict):
        return ToolOutcome.model_validate(reply["outcome"]), int(reply.get("duration_ms", 0))
    if not call.sent:
        return ToolOutcome.failed("CANCELLED", "not sent: the run stopped", retryable=False), 0
    if read_only:
        return ToolOutcome.failed("CANCELLED", "interrupted during a read", retryable=True), 0
    return ToolOutcome.unknown("CANCELLED", "the request was sent; its effect is unknown"), 0
