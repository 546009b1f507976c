"""Child process of an isolated tool: ``python -m runs.engine.isolated_child`` (see
runs.engine.isolation)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from types import FrameType

import django

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_the_worker() -> None:
    """Stop this child and its whole process group (the tool's own children) when the worker
    process that started it dies: stopped at the end of its shutdown bound, or killed. The
    child runs in a session of its own, so no signal to the worker's group reaches it, and an
    orphan would run on with nobody to read its answer; its ledger row stays ``started`` and
    the next worker settles it, as after a crash.

    Linux only (prctl); elsewhere the tool's deadline still ends it. SIGUSR2, not SIGKILL: the
    kernel sends the signal to this process only, and the handler takes the group down.
    """

    def stop(signum: int, frame: FrameType | None) -> None:
        os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGUSR2, stop)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGUSR2)
    except (OSError, AttributeError):
        return
    # The worker may have died between starting us and the prctl: then we already have
    # another parent, and no signal will come.
    parent = os.environ.get("AGENTCONSOLE_ISOLATION_PARENT")
    if parent is not None and parent != str(os.getppid()):
        stop(signal.SIGUSR2, None)


def main() -> int:
    _die_with_the_worker()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")
    django.setup()

    # import here: the child is a fresh process; these modules need Django set up first.
    from agentconsole import wiring
    from policy.domain.contracts import CancelSignal, ToolContext
    from policy.domain.outcomes import ToolOutcome

    request = json.loads(sys.stdin.buffer.read())
    registered = wiring.registry().get(request["tool"], request["version"])
    if registered is None:
        outcome = ToolOutcome.failed("UNKNOWN_TOOL_OR_VERSION", "", retryable=False)
    else:
        c = request["ctx"]
        contract = registered.contract
        if request.get("faults") is True:
            # Only when the parent runs the fault-injecting executor (the fault lab, tests).
            # import here: after django.setup(), and never in a child without faults.
            from runs.fault_lab.faults import faulted_contract, plan_for

            plan = plan_for(c["run_id"])
            if plan is not None:
                contract = faulted_contract(contract, plan, c["run_id"])
        ctx = ToolContext(
            run_id=c["run_id"],
            subject=c["subject"],
            step=c["step"],
            idempotency_token=c["idempotency_token"],
            deadline_ms=c["deadline_ms"],
            cancel=CancelSignal(),
            confirmation_id=c["confirmation_id"],
            proposal_id=c.get("proposal_id"),
            secrets=c["secrets"],
            trace_headers=c.get("trace_headers", {}),
            services=c["services"],
        )
        try:
            outcome = contract.execute(request["arguments"], ctx)
        except Exception as exc:
            outcome = ToolOutcome.failed("TOOL_INTERNAL_ERROR", type(exc).__name__, retryable=False)
    sys.stdout.write(outcome.model_dump_json() + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
