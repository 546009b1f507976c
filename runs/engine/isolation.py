"""Isolated tools run in a child process that is stopped hard (SIGKILL of its process group)
when the deadline passes or the run is cancelled — a cooperative signal is not proof that a
tool stopped (seed §7, §13).

The child (``python -m runs.engine.isolated_child``) receives the command on stdin — never in argv
or the environment, where secrets would be visible to other processes — and prints the outcome as
one JSON line on stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

from policy.domain.contracts import SideEffect, ToolContext, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.outcomes import ToolOutcome

POLL_S = 0.02
# The child's whole stdout (the outcome line): past this it is killed, OUTPUT_TOO_LARGE.
MAX_OUTPUT_BYTES = 1024 * 1024
READ_CHUNK = 64 * 1024


def run_isolated(
    contract: ToolContract,
    arguments: dict[str, Any],
    ctx: ToolContext,
    command: ExecutableCommand,
    *,
    faults: bool = False,
) -> ToolOutcome:
    """Run the tool in a child. ``faults``: the child applies the run's fault plan — set only
    by the fault-injecting executor, so the child decides exactly as its parent did."""
    payload = json.dumps(
        {
            "tool": contract.name,
            "faults": faults,
            "version": contract.version,
            "arguments": arguments,
            "ctx": {
                "run_id": ctx.run_id,
                "subject": ctx.subject,
                "step": ctx.step,
                "idempotency_token": ctx.idempotency_token,
                "deadline_ms": ctx.deadline_ms,
                "confirmation_id": ctx.confirmation_id,
                "proposal_id": ctx.proposal_id,
                "secrets": dict(ctx.secrets),
                "trace_headers": dict(ctx.trace_headers),
                "services": {k: v for k, v in ctx.services.items() if isinstance(v, str)},
            },
        }
    ).encode("utf-8")
    proc = subprocess.Popen(  # our own interpreter and module, no shell
        [sys.executable, "-m", "runs.engine.isolated_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: a hard stop takes its children too
        # Its own session also means a signal to the worker's group never reaches it: the child
        # asks the kernel to be told when this process dies (runs/engine/isolated_child.py).
        env={**os.environ, PARENT_ENV: str(os.getpid())},
    )
    if proc.stdin is not None:  # always, with stdin=PIPE
        # The child reads all of stdin before it writes a byte, so this cannot block on it.
        proc.stdin.write(payload)
        proc.stdin.close()
    output, stopped = _collect(proc, ctx)
    if stopped == "OUTPUT_TOO_LARGE":
        if contract.side_effect is SideEffect.READ:
            return ToolOutcome.failed(
                "OUTPUT_TOO_LARGE", f"more than {MAX_OUTPUT_BYTES} bytes", retryable=False
            )
        # Not ``failed``: the child prints its outcome only after execute() returned (or the
        # tool printed mid-write), so the effect most likely happened. A ``failed`` would let a
        # retry make it twice; ``unknown`` asks reconcile, else a person (seed §15).
        return ToolOutcome.unknown("OUTPUT_TOO_LARGE", f"more than {MAX_OUTPUT_BYTES} bytes")
    if stopped:
        if contract.side_effect is SideEffect.READ:
            # A read has no effect to doubt: known not to have happened.
            return ToolOutcome.failed("TOOL_STOPPED", stopped, retryable=False)
        return ToolOutcome.unknown("TOOL_STOPPED", f"child process killed: {stopped}")
    try:
        return ToolOutcome.model_validate_json(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ToolOutcome.failed("TOOL_CHILD_FAILED", "no outcome from the child", retryable=False)


PARENT_ENV = "AGENTCONSOLE_ISOLATION_PARENT"


def _collect(proc: subprocess.Popen[bytes], ctx: ToolContext) -> tuple[bytes, str | None]:
    """Read the child's stdout *while it runs*, until it exits, or kill it.

    Reading only after it exits deadlocks: a child whose output outgrows the pipe (64 KiB on
    Linux) blocks in write() until the deadline kills it (issue 9 item 5). Killed (its whole
    process group) on cancel, at the deadline, or once the output passes MAX_OUTPUT_BYTES;
    returns (output, why it was stopped or None).
    """
    stdout = proc.stdout
    if stdout is None:  # never, with stdout=PIPE
        raise ValueError("the child has no stdout pipe")
    fd = stdout.fileno()
    chunks: list[bytes] = []
    size = 0
    stopped = None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        open_pipe = True
        # Until EOF *and* exit: a child that closed stdout may still be running its effect.
        while open_pipe or proc.poll() is None:
            if ctx.cancel.cancelled:
                stopped = ctx.cancel.reason or "CANCEL_REQUESTED"
            elif time.time() * 1000 >= ctx.deadline_ms:
                stopped = "TOOL_TIMEOUT"
            elif size > MAX_OUTPUT_BYTES:
                stopped = "OUTPUT_TOO_LARGE"
            if stopped:
                _kill(proc)
                break
            if not open_pipe:
                time.sleep(POLL_S)
                continue
            if selector.select(timeout=POLL_S):
                data = os.read(fd, READ_CHUNK)
                if data:
                    chunks.append(data)
                    size += len(data)
                else:  # EOF
                    selector.unregister(fd)
                    open_pipe = False
    stdout.close()
    return b"".join(chunks), stopped


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is gone since the last poll
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
