"""What the Django admin masks in a proposal's arguments: the tool contract's redacted fields and
every secret the scanner finds. Policy, not plumbing: it reads the tool registry, so it lives
here and not beside the read-only admin base (agentconsole/kernel/admin_base.py)."""

from __future__ import annotations

from typing import Any

from policy.domain.registry import ToolRegistry
from policy.domain.secrets.redaction import MASK, redact_fields, redact_secrets


def masked_arguments(
    tool_name: Any, tool_version: Any, arguments: Any, *, registry: ToolRegistry
) -> Any:
    """A proposal's arguments as the trace would show them: the fields the tool's contract names
    as redacted are masked, and every secret the scanner finds (the ledger, a pending proposal
    and a fixture planner's script keep them because the tool needs them; the admin does not:
    issue 21 item 1). An unregistered tool's arguments are masked whole: nobody said which are
    safe."""
    if not isinstance(arguments, dict):
        return redact_secrets(arguments)
    registered = registry.get(str(tool_name), str(tool_version))
    if registered is None:
        return dict.fromkeys(arguments, MASK)
    return redact_secrets(redact_fields(arguments, registered.contract.redacted_fields))


def masked_proposal(proposal: Any, *, registry: ToolRegistry) -> Any:
    if not isinstance(proposal, dict) or "arguments" not in proposal:
        return proposal
    return {
        **proposal,
        "arguments": masked_arguments(
            proposal.get("tool_name"),
            proposal.get("tool_version"),
            proposal["arguments"],
            registry=registry,
        ),
    }
