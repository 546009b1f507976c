"""The gateway's tool calls (issue 22 item 4): a command's call of a tool that only waits (an
MCP tool, ``ToolContract.waiting``), made on the gateway's event loop while its run holds no
worker (runs.domain.gateway.calls has the life of a call).

The outcome is recorded as it came (secrets scrubbed); the run's next step checks it as the
executor checks its own calls (output schema, post-condition) and settles the ledger.

A call a gateway lost (it died, or stopped with the call in flight) is claimed again as a new
attempt. Before ``tools/call`` goes out the gateway marks the call sent (``records.mark_sent``),
so the next attempt knows where the last one got to, and follows the ledger's recovery rule
(``runs.engine.executor.ThreadExecutor.recover``): never sent, or a read or idempotent write (same
token), send it; otherwise the effect is unknown and a person decides (the step reconciles
first when the tool can be asked).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from policy.domain.contracts import CancelSignal, ToolContext
from policy.domain.outcomes import ToolOutcome
from policy.domain.registry import ToolRegistry
from runs.calls import records
from runs.domain.gateway.calls import tool_reply
from runs.engine.executor import scrubbed, tool_secrets

# The code of a write whose request went out from a gateway that was lost before its answer.
GATEWAY_LOST = "GATEWAY_LOST"


@dataclass(frozen=True)
class Tools:
    """What the gateway calls tools with: the registry (contracts that can wait), each tool's
    secrets by contract name (never recorded), and each MCP server's limit of calls in
    flight."""

    registry: ToolRegistry
    secrets: Mapping[str, Mapping[str, str]]
    max_in_flight: int


async def make(
    c: records.Claimed,
    *,
    tools: Tools | None,
    now_ms: Callable[[], int],
    mark_sent: Callable[[], Awaitable[bool]],
) -> records.Result:
    """One attempt of a claimed tool call; its outcome, whatever it is, is the call's answer.
    Never raises for what the tool does (cancellation passes through)."""
    started = time.monotonic()
    outcome = await _outcome(c, tools=tools, now_ms=now_ms, mark_sent=mark_sent)
    duration_ms = int((time.monotonic() - started) * 1000)
    return records.Result(
        c.call_id,
        c.attempt,
        "answered",
        outcome.code or outcome.status.value,
        reply=tool_reply(outcome, duration_ms),
        latency_ms=duration_ms,
    )


async def _outcome(
    c: records.Claimed,
    *,
    tools: Tools | None,
    now_ms: Callable[[], int],
    mark_sent: Callable[[], Awaitable[bool]],
) -> ToolOutcome:
    request = c.body
    if c.sent and not request.get("replayable"):
        # An earlier attempt went out and its gateway was lost: a write that cannot be
        # repeated may have had its effect.
        return ToolOutcome.unknown(GATEWAY_LOST, "the gateway was lost after sending the call")
    registered = tools.registry.get(request["tool"], request["version"]) if tools else None
    if tools is None or registered is None or registered.contract.waiting is None:
        # Not sent: the tool was re-accepted, switched off or removed since the gate passed it.
        return ToolOutcome.rejected("MCP_TOOL_CHANGED", "the tool is no longer accepted so")
    contract, waiting = registered.contract, registered.contract.waiting
    left_ms = c.deadline_ms - now_ms()
    if left_ms <= 0:
        return ToolOutcome.failed("TOOL_DEADLINE_EXCEEDED", "no time left", retryable=False)
    secrets = tool_secrets(tools.secrets, contract)
    ctx = ToolContext(
        run_id=c.run_id,
        subject=c.subject,
        step=int(request.get("step", 0)),
        idempotency_token=request["token"],
        deadline_ms=c.deadline_ms,
        cancel=CancelSignal(),
        confirmation_id=request.get("confirmation_id"),
        proposal_id=request.get("proposal_id"),
        secrets=secrets,
        trace_headers=request.get("trace", {}),
    )
    outcome = await waiting.call(
        dict(request["arguments"]), ctx, timeout_ms=left_ms, before_send=mark_sent
    )
    # Recorded in the database: the tool's secrets never are.
    return scrubbed(outcome, secrets)
