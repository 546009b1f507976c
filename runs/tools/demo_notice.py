"""``publish_notice``: a demo tool whose confirmation needs four eyes (DEBUG only).

It stands for an irreversible write: a notice sent to every customer cannot be taken back. Its
contract asks for two different people to approve each call, one of them an operator who is not
the run's owner (``approvers="four_eyes"``), so the demo's queue shows a four-eyes item: the
first approval is recorded and the run keeps waiting, the second lets it run. It sends nothing
anywhere.

Registered only when ``DEBUG`` is on (``agentconsole.wiring.demo_contracts``), like
``notify_partner``.
"""

from __future__ import annotations

from typing import Any

from policy.domain.confirmation.approvers import ApproverRule
from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContext, ToolContract
from policy.domain.origins.argument_policy import ArgumentRule
from policy.domain.outcomes import ToolOutcome

NAME = "publish_notice"
CAPABILITY = "notice:publish"


def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    if ctx.cancel.cancelled:
        return ToolOutcome.failed("CANCELLED", "cancelled before publishing", retryable=False)
    return ToolOutcome.succeeded({"published": True, "characters": len(arguments["text"])})


def contract() -> ToolContract:
    return ToolContract(
        name=NAME,
        version="1",
        description="Demo only: publish a notice to every customer (it cannot be taken back).",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 500}},
            "required": ["text"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "published": {"type": "boolean"},
                "characters": {"type": "integer", "minimum": 0},
            },
            "required": ["published", "characters"],
        },
        required_capabilities=(CAPABILITY,),
        side_effect=SideEffect.IRREVERSIBLE,
        confirmation=ConfirmationMode.PER_CALL,
        approvers=ApproverRule.FOUR_EYES,
        timeout_ms=2_000,
        execute=execute,
        logged_fields=("text",),
        untrusted_arguments={"text": ArgumentRule.CONFIRM},
    )
