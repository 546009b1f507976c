"""A tool package for the approver tests, registered through ``AGENTCONSOLE_TOOLS`` as any
third-party tool is: ``publish_notice``, an irreversible write whose contract asks for four
eyes (two different people, one an operator who is not the run's owner).

It writes nothing anywhere: each call is appended to ``PUBLISHED`` so a test can tell whether
the tool really ran, and how often.
"""

from __future__ import annotations

from typing import Any

from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContext, ToolContract
from policy.domain.outcomes import ToolOutcome

NAME = "publish_notice"
CAPABILITY = "notice:publish"
PUBLISHED: list[dict[str, Any]] = []


def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    PUBLISHED.append({"run_id": ctx.run_id, **arguments})
    return ToolOutcome.succeeded({"published": True})


def contract() -> ToolContract:
    return ToolContract(
        name=NAME,
        version="1",
        description="Publish a notice to every customer (cannot be taken back).",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 200}},
            "required": ["text"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"published": {"type": "boolean"}},
            "required": ["published"],
        },
        required_capabilities=(CAPABILITY,),
        side_effect=SideEffect.IRREVERSIBLE,
        confirmation=ConfirmationMode.PER_CALL,
        timeout_ms=2_000,
        execute=execute,
        logged_fields=("text",),
        approvers="four_eyes",  # type: ignore[arg-type]  # a package may spell it as text
    )
