"""Contracts a deployment must refuse at start-up (issue 9 item 15), one factory each, named in
AGENTCONSOLE_TOOLS as ``tests.plugins.broken_contracts.<factory>``."""

from typing import Any

from policy.domain.contracts import ConfirmationMode, PathResource, SideEffect, ToolContract
from policy.domain.outcomes import ToolOutcome

GOOD_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"x": {"type": "string"}},
    "additionalProperties": False,
}


def _contract(input_schema: Any = None, output_schema: Any = None, **extra: Any) -> ToolContract:
    return ToolContract(
        name="broken",
        version="1",
        description="A contract with one defect.",
        input_schema=GOOD_INPUT if input_schema is None else input_schema,
        output_schema={"type": "object"} if output_schema is None else output_schema,
        required_capabilities=("text:analyze",),
        side_effect=SideEffect.READ,
        confirmation=ConfirmationMode.NEVER,
        timeout_ms=2000,
        execute=lambda arguments, ctx: ToolOutcome.succeeded({}),
        **extra,
    )


def good():
    return _contract()


def missing_additional_properties():
    return _contract({"type": "object", "properties": {"x": {"type": "string"}}})


def additional_properties_true():
    return _contract({**GOOD_INPUT, "additionalProperties": True})


def invalid_input_schema():
    return _contract({**GOOD_INPUT, "properties": {"x": {"type": "nonsense"}}})


def invalid_output_schema():
    return _contract(output_schema={"type": "object", "required": "words"})


def open_nested_object():
    nested = {"type": "object", "properties": {"admin": {"type": "boolean"}}}
    return _contract({**GOOD_INPUT, "properties": {"filter": nested}})


def open_object_in_array():
    items = {"type": "array", "items": {"type": "object", "additionalProperties": True}}
    return _contract({**GOOD_INPUT, "properties": {"rows": items}})


def resource_field_not_an_input():
    return _contract(resource=PathResource(field="path"))


def malformed_properties():
    return _contract({**GOOD_INPUT, "properties": ["x"]})
