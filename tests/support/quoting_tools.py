"""A tool package for the erase tests, registered through ``AGENTCONSOLE_TOOLS`` as any
third-party tool is: ``check_language`` quotes its argument back in the places a tool's own words
are kept, so a test can put a user's value there.

* ``mode: "reject"``: rejected with a code that quotes the text (the ledger's outcome).
* ``mode: "unsure"``: the outcome is unknown, so the run fails and hands off. Retried under the
  same idempotency token by a reviewer, it is rejected with the quoting code (the handoff's
  resolution).
"""

from __future__ import annotations

from typing import Any

from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContext, ToolContract
from policy.domain.outcomes import ToolOutcome

NAME = "check_language"
CAPABILITY = "language:check"
# Idempotency tokens already executed: the second call under one token is the reviewer's retry.
CALLED: set[str] = set()


def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    text = arguments["text"]
    if arguments["mode"] == "reject" or ctx.idempotency_token in CALLED:
        return ToolOutcome.rejected(f"UNKNOWN_LANGUAGE {text}", "no such language")
    CALLED.add(ctx.idempotency_token)
    return ToolOutcome.unknown("LANGUAGE_SERVICE_TIMEOUT", "no answer in time")


def contract() -> ToolContract:
    return ToolContract(
        name=NAME,
        version="1",
        description="Check that a language exists (quotes it back in its codes).",
        input_schema={
            "type": "object",
            "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": 200},
                "mode": {"enum": ["reject", "unsure"]},
            },
            "required": ["text", "mode"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"checked": {"type": "boolean"}},
            "required": ["checked"],
        },
        required_capabilities=(CAPABILITY,),
        side_effect=SideEffect.IDEMPOTENT_WRITE,
        confirmation=ConfirmationMode.NEVER,
        timeout_ms=2_000,
        execute=execute,
        logged_fields=("mode",),
    )
