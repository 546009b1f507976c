"""``notify_partner``: a demo tool whose outcome is always unknown (DEBUG only).

It stands for a partner system that accepts a message and then never answers: the call may
or may not have had its effect, and the tool has no way to ask (no ``reconcile``). The run
stops with ``TOOL_OUTCOME_UNKNOWN`` and a reviewer gets a handoff whose bundle shows the
idempotency token to look for in the partner's system. It sends nothing anywhere.

The composition root registers it only when ``DEBUG`` is on (``agentconsole.wiring``), so the
demo's "unknown effect handed off" exists on a development setup and never in production.
"""

from __future__ import annotations

from typing import Any

from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContext, ToolContract
from policy.domain.origins.argument_policy import ArgumentRule
from policy.domain.outcomes import ToolOutcome

NAME = "notify_partner"
CAPABILITY = "partner:notify"


def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    if ctx.cancel.cancelled:
        return ToolOutcome.failed("CANCELLED", "cancelled before sending", retryable=False)
    # Deterministic on purpose: every call (a retry under the same token included) ends the
    # same way, so the demo's handoff is always the one a person must settle by checking.
    return ToolOutcome.unknown(
        "PARTNER_NO_ANSWER",
        f"{arguments['partner']} accepted the connection and did not answer",
    )


def contract() -> ToolContract:
    return ToolContract(
        name=NAME,
        version="1",
        description=(
            "Demo only: notify a partner system (it never answers, so the outcome is unknown)."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "partner": {"type": "string", "minLength": 1, "maxLength": 64},
                "message": {"type": "string", "minLength": 1, "maxLength": 2000},
            },
            "required": ["partner", "message"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"delivered": {"type": "boolean"}},
            "required": ["delivered"],
        },
        required_capabilities=(CAPABILITY,),
        # The partner deduplicates by idempotency token: a retry under the same token is safe.
        side_effect=SideEffect.IDEMPOTENT_WRITE,
        confirmation=ConfirmationMode.NEVER,
        timeout_ms=2_000,
        execute=execute,
        logged_fields=("partner",),
        # Which partner is told is never taken from retrieved text; what it is told may be.
        untrusted_arguments={"partner": ArgumentRule.REFUSE, "message": ArgumentRule.CARRY},
    )
