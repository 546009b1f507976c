"""Child process of an isolated tool: ``python -m runs.isolated_child`` (see runs.isolation)."""

from __future__ import annotations

import json
import os
import sys

import django


def main() -> int:
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
            from runs.faults import faulted_contract, plan_for

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
