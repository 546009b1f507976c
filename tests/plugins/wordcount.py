"""An integrator's tool: count the words of a text. Registered with
AGENTCONSOLE_TOOLS = ["tests.plugins.wordcount"] (the README shows this same file)."""

from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContract
from policy.domain.outcomes import ToolOutcome


def execute(arguments, ctx):
    words = arguments["text"].split()
    if ctx.cancel.cancelled:
        return ToolOutcome.failed("CANCELLED", "cancelled", retryable=False)
    return ToolOutcome.succeeded({"words": len(words)})


def contract():
    return ToolContract(
        name="word_count",
        version="1",
        description="Count the words of a text.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 10000}},
            "required": ["text"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"words": {"type": "integer", "minimum": 0}},
            "required": ["words"],
        },
        required_capabilities=("text:analyze",),
        side_effect=SideEffect.READ,
        confirmation=ConfirmationMode.NEVER,
        timeout_ms=2000,
        execute=execute,
        logged_fields=(),
        redacted_fields=("text",),
    )
