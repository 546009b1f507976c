"""Isolated tools run in a child process that is stopped hard (SIGKILL of its process group)
when the deadline passes or the run is cancelled — a cooperative signal is not proof that a
tool stopped (seed §7, §13).

The child (``python -m runs.isolated_child``) receives the command on stdin — never in argv or
the environment, where secrets would be visible to other processes — and prints the outcome as
one JSON line on stdout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from policy.domain.contracts import SideEffect, ToolContext, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.proposals import ToolOutcome

POLL_S = 0.02
MAX_OUTPUT_BYTES = 1024 * 1024


def run_isolated(
    contract: ToolContract, arguments: dict[str, Any], ctx: ToolContext, command: ExecutableCommand
) -> ToolOutcome:
    payload = json.dumps(
        {
            "tool": contract.name,
            "version": contract.version,
            "arguments": arguments,
            "ctx": {
                "run_id": ctx.run_id,
                "subject": ctx.subject,
                "step": ctx.step,
                "idempotency_token": ctx.idempotency_token,
                "deadline_ms": ctx.deadline_ms,
                "confirmation_id": ctx.confirmation_id,
                "secrets": dict(ctx.secrets),
                "services": {k: v for k, v in ctx.services.items() if isinstance(v, str)},
            },
        }
    ).encode("utf-8")
    proc = subprocess.Popen(  # our own interpreter and module, no shell
        [sys.executable, "-m", "runs.isolated_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: a hard stop takes its children too
    )
    if proc.stdin is not None:  # always, with stdin=PIPE
        proc.stdin.write(payload)
        proc.stdin.close()
    stopped = None
    while proc.poll() is None:
        if ctx.cancel.cancelled:
            stopped = ctx.cancel.reason or "CANCEL_REQUESTED"
        elif time.time() * 1000 >= ctx.deadline_ms:
            stopped = "TOOL_TIMEOUT"
        if stopped:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        time.sleep(POLL_S)
    if stopped:
        if contract.side_effect is SideEffect.READ:
            # A read has no effect to doubt: known not to have happened.
            return ToolOutcome.failed("TOOL_STOPPED", stopped, retryable=False)
        return ToolOutcome.unknown("TOOL_STOPPED", f"child process killed: {stopped}")
    output = proc.stdout.read(MAX_OUTPUT_BYTES) if proc.stdout else b""
    try:
        return ToolOutcome.model_validate_json(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ToolOutcome.failed("TOOL_CHILD_FAILED", "no outcome from the child", retryable=False)
