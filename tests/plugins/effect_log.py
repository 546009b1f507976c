"""Test tools for the fault tests (tests/faults): an "external system" that does NOT dedupe.

Registered with ``AGENTCONSOLE_TOOLS=tests.plugins.effect_log`` (worker environment) or
``settings.AGENTCONSOLE_TOOLS = ["tests.plugins.effect_log"]`` (test process).

The external system is one append-only file, ``<run-output root>/effect-log.jsonl``: every real
effect appends exactly one JSON line ``{"token", "run_id", "entry", "pid"}`` with a single
``O_APPEND`` write, and nothing ever removes or merges a line. A command executed twice -- under
the same token or a new one -- therefore leaves two lines: counting lines per run is the "no
second effect" check. ``reconcile(token)`` asks that file whether the token is in it.

Tools:

* ``append_entry`` -- irreversible write, not isolated. ``hold_ms`` keeps it in flight *after*
  the effect (the answer is not yet back): the window in which a worker killed from outside
  leaves an effect the ledger does not know about.
* ``hang_read`` -- isolated read that ignores every catchable signal and sleeps in small steps
  (optionally with a grandchild in its process group); only a hard stop ends it early.
* ``append_then_hang`` -- isolated irreversible write: appends its line, then hangs like
  ``hang_read``. Stopped hard, its effect happened; only ``reconcile`` can tell.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContext, ToolContract
from policy.domain.outcomes import ToolOutcome

STORE_NAME = "effect-log.jsonl"
HANG_LIMIT_S = 30.0


def store_path(run_output_root: str | Path) -> Path:
    return Path(run_output_root) / STORE_NAME


def read_store(run_output_root: str | Path) -> list[dict[str, Any]]:
    """Every effect ever applied, in order (what a test counts)."""
    path = store_path(run_output_root)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(ctx: ToolContext, entry: str) -> None:
    line = json.dumps(
        {"token": ctx.idempotency_token, "run_id": ctx.run_id, "entry": entry, "pid": os.getpid()}
    )
    path = store_path(ctx.services["run_output_root"])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))  # one write: lines never interleave
        os.fsync(fd)
    finally:
        os.close(fd)


def _value(ctx: ToolContext, entry: str) -> dict[str, Any]:
    return {"entry": entry, "token_prefix": ctx.idempotency_token[:12]}


def reconcile(token: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    found = [r for r in read_store(ctx.services["run_output_root"]) if r["token"] == token]
    if found:
        return ToolOutcome.succeeded({"entry": found[0]["entry"], "token_prefix": token[:12]})
    return ToolOutcome.failed("EFFECT_ABSENT", "the token is not in the store", retryable=False)


def _hang(seconds: float) -> None:
    """Ignore every catchable signal (in the child's main thread) and sleep in small steps."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
    end = time.monotonic() + min(seconds, HANG_LIMIT_S)
    while time.monotonic() < end:
        time.sleep(0.05)


def _spawn_grandchild(seconds: float) -> None:
    # Same process group as this child (no new session): a hard stop of the group takes it too.
    subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time\n"
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(s, signal.SIG_IGN)\n"
            f"time.sleep({min(seconds, HANG_LIMIT_S)!r})\n",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def append_entry(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    if ctx.cancel.cancelled:
        return ToolOutcome.failed("CANCELLED", "cancelled before the effect", retryable=False)
    entry = arguments["entry"]
    _append(ctx, entry)
    hold_ms = arguments.get("hold_ms", 0)
    if hold_ms:
        # The effect happened; the answer is on its way back. A cancel cannot undo it.
        ctx.cancel.wait(hold_ms / 1000)
    return ToolOutcome.succeeded(_value(ctx, entry))


def hang_read(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    seconds = float(arguments["seconds"])
    if arguments.get("grandchild"):
        _spawn_grandchild(seconds)
    _hang(seconds)
    return ToolOutcome.succeeded({"slept_s": seconds})


def append_then_hang(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    entry = arguments["entry"]
    _append(ctx, entry)
    _hang(float(arguments["seconds"]))
    return ToolOutcome.succeeded(_value(ctx, entry))


_ENTRY_OUT = {
    "type": "object",
    "properties": {"entry": {"type": "string"}, "token_prefix": {"type": "string"}},
    "required": ["entry", "token_prefix"],
}


def _contract(**kwargs: Any) -> ToolContract:
    return ToolContract(
        version="1",
        required_capabilities=("effectlog:write",),
        confirmation=ConfirmationMode.NEVER,
        logged_fields=("entry",),
        **kwargs,
    )


def _appending(**kwargs: Any) -> ToolContract:
    """A tool that appends to the effect log: irreversible, answered by ``reconcile``."""
    return _contract(
        output_schema=_ENTRY_OUT, side_effect=SideEffect.IRREVERSIBLE, reconcile=reconcile, **kwargs
    )


def _closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An input object with exactly these properties."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


TOOLS = [
    _appending(
        name="append_entry",
        description="Append one entry to the external effect log (never deduplicated).",
        input_schema=_closed(
            {
                "entry": {"type": "string", "minLength": 1, "maxLength": 200},
                "hold_ms": {"type": "integer", "minimum": 0, "maximum": 10_000},
            },
            ["entry"],
        ),
        timeout_ms=20_000,
        execute=append_entry,
    ),
    _contract(
        name="hang_read",
        description="Read nothing, slowly: ignores cooperative cancel and catchable signals.",
        input_schema=_closed(
            {
                "seconds": {"type": "number", "minimum": 0, "maximum": HANG_LIMIT_S},
                "grandchild": {"type": "boolean"},
            },
            ["seconds"],
        ),
        output_schema={
            "type": "object",
            "properties": {"slept_s": {"type": "number"}},
            "required": ["slept_s"],
        },
        side_effect=SideEffect.READ,
        timeout_ms=60_000,
        execute=hang_read,
        isolated=True,
    ),
    _appending(
        name="append_then_hang",
        description="Append one entry, then hang ignoring cooperative cancel.",
        input_schema=_closed(
            {
                "entry": {"type": "string", "minLength": 1, "maxLength": 200},
                "seconds": {"type": "number", "minimum": 0, "maximum": HANG_LIMIT_S},
            },
            ["entry", "seconds"],
        ),
        timeout_ms=60_000,
        execute=append_then_hang,
        isolated=True,
    ),
]
