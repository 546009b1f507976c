"""Plugin tools for the OpenTelemetry tests (tests/telemetry), registered with
``AGENTCONSOLE_TOOLS = ["tests.plugins.traced_tools"]``.

Each records the ``ToolContext.trace_headers`` it was handed, so a test can check that the tool
saw the W3C trace context of its own span. ``traced_lookup`` uses a server secret and carelessly
echoes it with its arguments: the spans must carry neither.
"""

from __future__ import annotations

import threading
from typing import Any

from policy.domain.contracts import (
    ConfirmationMode,
    RetryPolicy,
    SideEffect,
    ToolContext,
    ToolContract,
)
from policy.domain.observations import TrustLabel
from policy.domain.outcomes import ToolOutcome

CAPABILITY = "traced:use"

# (tool name, trace headers) of every real call, in order.
SEEN: list[tuple[str, dict[str, str]]] = []
_LOCK = threading.Lock()
_FAILED_ONCE: set[str] = set()


def reset() -> None:
    with _LOCK:
        SEEN.clear()
        _FAILED_ONCE.clear()


def _seen(name: str, ctx: ToolContext) -> None:
    with _LOCK:
        SEEN.append((name, dict(ctx.trace_headers)))


def _lookup(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    _seen("traced_lookup", ctx)
    key = ctx.secrets.get("API_KEY", "")
    return ToolOutcome.succeeded({"query": args["query"], "auth": f"Bearer {key}"})


def _note(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    _seen("traced_note", ctx)
    return ToolOutcome.succeeded({"saved": args["text"]})


def _flaky(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    """Fails (retryable) the first time it sees a token, quoting its argument in the message."""
    _seen("traced_flaky", ctx)
    with _LOCK:
        first = ctx.idempotency_token not in _FAILED_ONCE
        _FAILED_ONCE.add(ctx.idempotency_token)
    if first:
        return ToolOutcome.failed(
            "UPSTREAM_BUSY", f"busy while reading {args['text']}", retryable=True
        )
    return ToolOutcome.succeeded({"read": args["text"]})


def _isolated_context(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    """Runs in a child process: answers with the trace context the child was handed."""
    return ToolOutcome.succeeded({"traceparent": ctx.trace_headers.get("traceparent", "")})


def _one_string(name: str) -> dict[str, Any]:
    """An input of one required, short string argument (and nothing else)."""
    text = {"type": "string", "minLength": 1, "maxLength": 200}
    return {"type": "object", "properties": {name: text}, "required": [name],
            "additionalProperties": False}  # fmt: skip


def _contract(name: str, execute: Any, **fields: Any) -> ToolContract:
    base: dict[str, Any] = {
        "name": name,
        "version": "1",
        "description": f"{name} (telemetry tests)",
        "input_schema": _one_string("text"),
        "output_schema": {"type": "object"},
        "required_capabilities": (CAPABILITY,),
        "side_effect": SideEffect.READ,
        "confirmation": ConfirmationMode.NEVER,
        "timeout_ms": 5_000,
        "execute": execute,
        "output_trust": TrustLabel.TRUSTED_TOOL,
    }
    return ToolContract(**{**base, **fields})


TOOLS = [
    _contract(
        "traced_lookup",
        _lookup,
        input_schema=_one_string("query"),
        secret_names=("API_KEY",),
        # Loggable in the run's own trace (an operator reads it there), never in a span.
        logged_fields=("query",),
    ),
    _contract(
        "traced_note",
        _note,
        side_effect=SideEffect.IDEMPOTENT_WRITE,
        confirmation=ConfirmationMode.PER_CALL,
    ),
    _contract("traced_flaky", _flaky, retry=RetryPolicy(max_attempts=3, backoff_ms=1)),
    _contract("traced_isolated", _isolated_context, isolated=True, timeout_ms=20_000),
]
