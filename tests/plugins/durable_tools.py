"""Plugin tools for the durable-execution tests (tests/durable). Registered with
``AGENTCONSOLE_TOOLS = ["tests.plugins.durable_tools"]`` (and, for isolated tools, the same value
in the environment, so the child process ``runs.engine.isolated_child`` finds them too).

In-process tools record every real call in ``CALLS`` (tool name, idempotency token) so a test
can tell whether a tool body ran, how often, and under which token. Fault wrappers
(``runs.fault_lab.faults``) answer before the body runs, so an injected failure is not a call here.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from policy.domain.contracts import (
    ConfirmationMode,
    RetryPolicy,
    SideEffect,
    ToolContext,
    ToolContract,
)
from policy.domain.outcomes import ToolOutcome

CAPABILITY = "durable:use"

CALLS: list[tuple[str, str]] = []
# The arguments of each real call of a recording tool, as the tool received them.
ARGUMENTS: list[tuple[str, dict[str, Any]]] = []
# Set when ``durable_wait`` has started, so a test can act while the tool runs.
WAIT_STARTED = threading.Event()
_LOCK = threading.Lock()


def reset() -> None:
    with _LOCK:
        CALLS.clear()
        ARGUMENTS.clear()
    WAIT_STARTED.clear()


def calls(name: str) -> list[str]:
    """The idempotency tokens of the real calls of tool ``name``, in order."""
    with _LOCK:
        return [token for tool, token in CALLS if tool == name]


def _record(name: str, ctx: ToolContext) -> None:
    with _LOCK:
        CALLS.append((name, ctx.idempotency_token))


def _schema(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


_TEXT = {"type": "string", "maxLength": 200}
_OK_OUTPUT = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def _contract(name: str, execute: Any, **overrides: Any) -> ToolContract:
    fields: dict[str, Any] = {
        "name": name,
        "version": "1",
        "description": f"durable-test tool {name}",
        "input_schema": _schema(text=_TEXT),
        "output_schema": _OK_OUTPUT,
        "required_capabilities": (CAPABILITY,),
        "side_effect": SideEffect.READ,
        "confirmation": ConfirmationMode.NEVER,
        "timeout_ms": 2_000,
        "execute": execute,
        "logged_fields": (),
        "redacted_fields": ("text",),
    }
    fields.update(overrides)
    return ToolContract(**fields)


def _isolated(name: str, execute: Any, timeout_ms: int, **overrides: Any) -> ToolContract:
    """A tool run in a child process that is killed at its deadline."""
    return _contract(name, execute, isolated=True, timeout_ms=timeout_ms, **overrides)


COMPENSATABLE = SideEffect.COMPENSATABLE_WRITE


# --- in-process tools --------------------------------------------------------------------------


def _recording(name: str) -> Callable[[dict[str, Any], ToolContext], ToolOutcome]:
    """A tool that records its call (token and all) and succeeds."""

    def run(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        _record(name, ctx)
        with _LOCK:
            ARGUMENTS.append((name, dict(arguments)))
        return ToolOutcome.succeeded({"ok": True})

    return run


_flaky = _recording("durable_flaky")
_steady = _recording("durable_steady")
# A compensatable write to some outside system that cannot be asked afterwards.
_note = _recording("durable_note")
_guarded = _recording("durable_guarded")


def _wait(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    """Cooperative: waits for the cancel signal up to ``seconds``; stops at the signal."""
    _record("durable_wait", ctx)
    WAIT_STARTED.set()
    if ctx.cancel.wait(float(arguments["seconds"])):
        return ToolOutcome.failed("CANCELLED", "stopped at the cancel signal", retryable=False)
    return ToolOutcome.succeeded({"ok": True})


# --- isolated tools (run in the child process ``runs.engine.isolated_child``) ---------------------


def _isolated_echo(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome.succeeded({"ok": True, "pid": os.getpid(), "echo": arguments["text"]})


def _isolated_sleep(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    time.sleep(30)  # ignores every cooperative signal: only a hard stop ends it early
    return ToolOutcome.succeeded({"ok": True})


def _isolated_secret(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    secret = ctx.secrets.get("api_key", "")
    # Uses the secret (its digest proves it arrived) and, carelessly, echoes it.
    return ToolOutcome.succeeded(
        {
            "ok": bool(secret),
            "echo": f"key={secret}",
            "sha256": hashlib.sha256(secret.encode("utf-8")).hexdigest(),
            "names": sorted(ctx.secrets),
        },
    )


def _isolated_big(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    """An outcome of ``size`` bytes: more than a pipe holds (64 KiB), maybe more than allowed."""
    return ToolOutcome.succeeded({"ok": True, "blob": "x" * arguments["size"]})


def _bad_output(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    """Succeeds with an output its schema forbids: ``ok`` must be a boolean."""
    return ToolOutcome.succeeded({"ok": "yes"})


_WAIT_SCHEMA = _schema(seconds={"type": "number", "minimum": 0, "maximum": 60})
_BIG_SCHEMA = _schema(size={"type": "integer", "minimum": 0, "maximum": 4 * 1024 * 1024})
_ECHO_OUTPUT = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "pid": {"type": "integer"}, "echo": _TEXT},
    "required": ["ok", "pid", "echo"],
}
_SECRET_OUTPUT = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "echo": {"type": "string"},
        "sha256": {"type": "string"},
        "names": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["ok", "echo", "sha256", "names"],
}

TOOLS = [
    _contract(
        "durable_flaky",
        _flaky,
        side_effect=SideEffect.IDEMPOTENT_WRITE,
        retry=RetryPolicy(max_attempts=3, backoff_ms=10),
    ),
    _contract("durable_steady", _steady, side_effect=SideEffect.IDEMPOTENT_WRITE),
    # No reconcile: after a lost answer nobody can tell whether the write happened.
    _contract("durable_note", _note, side_effect=SideEffect.COMPENSATABLE_WRITE, timeout_ms=200),
    _contract("durable_guarded", _guarded, confirmation=ConfirmationMode.PER_CALL),
    _contract("durable_wait", _wait, input_schema=_WAIT_SCHEMA, timeout_ms=10_000),
    _isolated("durable_isolated_echo", _isolated_echo, 20_000, output_schema=_ECHO_OUTPUT),
    _isolated("durable_isolated_sleep", _isolated_sleep, 300),
    _isolated("durable_isolated_hang", _isolated_sleep, 20_000),
    _isolated("durable_isolated_sleep_write", _isolated_sleep, 300, side_effect=COMPENSATABLE),
    _contract("durable_bad_output", _bad_output),
    _isolated("durable_isolated_bad_output", _bad_output, 20_000),
    # Deadlines far away (60 s): an outcome here is never the deadline's doing.
    _isolated("durable_isolated_big", _isolated_big, 60_000, input_schema=_BIG_SCHEMA),
    _isolated(
        "durable_isolated_big_write",
        _isolated_big,
        60_000,
        input_schema=_BIG_SCHEMA,
        side_effect=COMPENSATABLE,
    ),
    _isolated(
        "durable_isolated_secret",
        _isolated_secret,
        20_000,
        output_schema=_SECRET_OUTPUT,
        secret_names=("api_key",),
    ),
]
