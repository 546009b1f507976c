"""The soak's tools (``AGENTCONSOLE_TOOLS=soak.tools``): a read and two writes to an external
system that does NOT deduplicate.

The external system is one append-only file, ``<run-output root>/soak-effects.jsonl``: every
real effect appends exactly one JSON line ``{"token", "run_id", "entry", "tool", "pid"}`` with a
single ``O_APPEND`` write (lines never interleave between processes), and nothing ever removes
or merges a line. A command executed twice -- under the same token or a new one -- leaves two
lines, so the soak's checker counts lines per token and per ``entry`` (unique per run and step).

* ``soak_read`` -- a read that takes ``hold_ms`` (a step long enough for a kill to land in it).
  After a crash the runtime may run it again under the same token: reads are not effects.
* ``soak_write`` -- irreversible, confirmed per call (a person approves it over HTTP). It waits
  ``before_ms``, appends its line, then waits ``after_ms`` (the effect happened, the answer is not
  back yet: the window in which a killed worker leaves an effect its ledger does not know).
  ``reconcile(token)`` asks the file, so recovery settles the row instead of writing again.
* ``soak_write_blind`` -- the same effect with no confirmation and no ``reconcile``: after a
  crash mid-call nobody can tell whether it happened, so the run must stop with a handoff and
  never write a second time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContext, ToolContract
from policy.domain.outcomes import ToolOutcome

STORE_NAME = "soak-effects.jsonl"
CAPABILITY = "soak:use"
MAX_HOLD_MS = 10_000


def store_path(run_output_root: str | Path) -> Path:
    return Path(run_output_root) / STORE_NAME


def read_effects(run_output_root: str | Path) -> list[dict[str, Any]]:
    """Every effect ever applied, in order (what the checker counts)."""
    path = store_path(run_output_root)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(ctx: ToolContext, tool: str, entry: str) -> None:
    line = json.dumps(
        {
            "token": ctx.idempotency_token,
            "run_id": ctx.run_id,
            "entry": entry,
            "tool": tool,
            "pid": os.getpid(),
        }
    )
    path = store_path(ctx.services["run_output_root"])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))  # one write: lines never interleave
    finally:
        os.close(fd)


def _cancelled() -> ToolOutcome:
    return ToolOutcome.failed("CANCELLED", "cancelled before the effect", retryable=False)


def soak_read(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    if ctx.cancel.wait(arguments["hold_ms"] / 1000):
        return _cancelled()
    return ToolOutcome.succeeded({"entry": arguments["entry"]})


def _write(tool: str) -> Any:
    def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        if ctx.cancel.wait(arguments["before_ms"] / 1000):
            return _cancelled()
        _append(ctx, tool, arguments["entry"])
        # The effect happened; the answer is on its way back. A cancel cannot undo it.
        ctx.cancel.wait(arguments["after_ms"] / 1000)
        return ToolOutcome.succeeded({"entry": arguments["entry"]})

    return execute


def reconcile(token: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    found = [r for r in read_effects(ctx.services["run_output_root"]) if r["token"] == token]
    if found:
        return ToolOutcome.succeeded({"entry": found[0]["entry"]})
    return ToolOutcome.failed("EFFECT_ABSENT", "the token is not in the store", retryable=False)


_HOLD = {"type": "integer", "minimum": 0, "maximum": MAX_HOLD_MS}
_ENTRY = {"type": "string", "minLength": 1, "maxLength": 200}
_OUT = {"type": "object", "properties": {"entry": _ENTRY}, "required": ["entry"]}


def _input(**holds: Any) -> dict[str, Any]:
    properties = {"entry": _ENTRY, **holds}
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


def _contract(**fields: Any) -> ToolContract:
    return ToolContract(
        version="1",
        output_schema=_OUT,
        required_capabilities=(CAPABILITY,),
        timeout_ms=30_000,
        logged_fields=("entry",),
        **fields,
    )


def _writer(name: str, description: str, **fields: Any) -> ToolContract:
    """An irreversible append to the external log, ``before_ms``/``after_ms`` around it."""
    return _contract(
        name=name,
        description=description,
        input_schema=_input(before_ms=_HOLD, after_ms=_HOLD),
        side_effect=SideEffect.IRREVERSIBLE,
        execute=_write(name),
        **fields,
    )


TOOLS = [
    _contract(
        name="soak_read",
        description="Read nothing, for hold_ms (a soak step a kill can land in).",
        input_schema=_input(hold_ms=_HOLD),
        side_effect=SideEffect.READ,
        confirmation=ConfirmationMode.NEVER,
        execute=soak_read,
    ),
    _writer(
        "soak_write",
        "Append one entry to the soak's external log (never deduplicated).",
        confirmation=ConfirmationMode.PER_CALL,
        reconcile=reconcile,
    ),
    _writer(
        "soak_write_blind",
        "Append one entry to the soak's external log; no way to ask afterwards.",
        confirmation=ConfirmationMode.NEVER,
    ),
]
