"""``save_preference``: the only way a run writes long-term memory.

It needs, at once: a whitelisted key with a valid value (semantic layer), a ``memory:write``
grant whose scope is the run's own subject (authorization), and a per-call user confirmation
bound to the exact proposal hash (confirmation layer). Retrieved text can propose a write; it
can never make one happen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory.domain.preferences import KeyPolicy, check_preference
from memory.models import PreferenceHistory, PreferenceRecord
from memory.services import preference_write
from policy.domain.contracts import (
    CallFacts,
    ConfirmationMode,
    SideEffect,
    SubjectResource,
    ToolContext,
    ToolContract,
)
from policy.domain.origins.argument_policy import ArgumentRule
from policy.domain.outcomes import OutcomeStatus, ToolOutcome, Verification


def contract(policies: Mapping[str, KeyPolicy]) -> ToolContract:
    def semantic(arguments: dict[str, Any], facts: CallFacts) -> tuple[str, str] | None:
        return check_preference(policies, arguments.get("key"), arguments.get("value"))

    def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        if not ctx.confirmation_id:
            # Unreachable through the gate (per-call confirmation); refuse rather than trust.
            return ToolOutcome.rejected("MEMORY_SOURCE_NOT_CONFIRMED", "no user confirmation")
        result = preference_write(
            subject=ctx.subject,
            policy=policies[arguments["key"]],
            value=arguments["value"],
            expected_version=arguments.get("expected_version"),
            confirmation_id=ctx.confirmation_id,
            run_id=ctx.run_id,
            idempotency_token=ctx.idempotency_token,
        )
        if not result.ok:
            # The conflict carries the current and the proposed value, for the user to see.
            return ToolOutcome(
                status=OutcomeStatus.REJECTED,
                code=result.code or "PREFERENCE_VERSION_CONFLICT",
                message="the preference changed since it was read",
                value=result.as_dict(),
            )
        return ToolOutcome.succeeded({"key": arguments["key"], "version": result.version})

    def verify(arguments: dict[str, Any], value: dict[str, Any], ctx: ToolContext) -> Verification:
        row = PreferenceRecord.objects.filter(subject=ctx.subject, key=arguments["key"]).first()
        ok = row is not None and row.value == arguments["value"] and row.revoked_at is None
        return Verification(ok=ok, code=None if ok else "PREFERENCE_NOT_STORED")

    def reconcile(token: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        row = PreferenceHistory.objects.filter(idempotency_token=token).first()
        if row is None:
            return ToolOutcome.failed(
                "PREFERENCE_NOT_WRITTEN", "no write under this token", retryable=True
            )
        return ToolOutcome.succeeded({"key": row.key, "version": row.version})

    return ToolContract(
        name="save_preference",
        version="1",
        description="Save a user-confirmed long-term preference (whitelisted keys only).",
        input_schema={
            "type": "object",
            "properties": {
                "key": {"type": "string", "minLength": 1, "maxLength": 64},
                "value": {"type": "string", "minLength": 1, "maxLength": 512},
                "expected_version": {"type": "integer", "minimum": 0},
            },
            "required": ["key", "value"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"key": {"type": "string"}, "version": {"type": "integer"}},
            "required": ["key", "version"],
        },
        required_capabilities=("memory:write",),
        side_effect=SideEffect.IDEMPOTENT_WRITE,
        confirmation=ConfirmationMode.PER_CALL,
        timeout_ms=5_000,
        execute=execute,
        verify=verify,
        reconcile=reconcile,
        resource=SubjectResource(),
        semantic_checks=(semantic,),
        logged_fields=("key",),
        redacted_fields=("value",),
        # A key read in retrieved text is refused outright; a value asks (it does anyway: the
        # contract asks per call), and the card says where it came from.
        untrusted_arguments={"key": ArgumentRule.REFUSE, "value": ArgumentRule.CONFIRM},
    )
