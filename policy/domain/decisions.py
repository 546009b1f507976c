"""The gate's possible answers, and the one object that lets a tool run.

``ExecutableCommand`` can only be built by the gate: its constructor demands a module-private
seal, so neither a planner nor an adapter can fabricate one from proposal data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_SEAL = object()

LAYERS = (
    "parse",
    "registry",
    "schema",
    "semantic",
    "authorization",
    "confirmation",
    "state",
    "budget",
)


@dataclass(frozen=True)
class ExecutableCommand:
    command_id: str
    run_id: str
    proposal_id: str
    tool_name: str
    tool_version: str
    validated_arguments: dict[str, Any]
    arguments_hash: str
    proposal_hash: str
    idempotency_token: str
    resource: str | None
    deadline_ms: int
    granted_capabilities: tuple[str, ...]
    grant_ids: tuple[str, ...]
    confirmation_id: str | None
    consume_confirmation: bool
    _seal: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._seal is not _SEAL:
            raise TypeError("an ExecutableCommand is made by the policy gate only")


def _issue(**kwargs: Any) -> ExecutableCommand:
    return ExecutableCommand(**kwargs, _seal=_SEAL)


@dataclass(frozen=True)
class Execute:
    command: ExecutableCommand
    passed: tuple[str, ...] = LAYERS[1:]


@dataclass(frozen=True)
class Reject:
    layer: str
    code: str
    message: str = ""
    passed: tuple[str, ...] = ()


@dataclass(frozen=True)
class NeedsConfirmation:
    proposal_hash: str
    confirmation_hash: str
    existing_confirmation_id: str | None = None
    passed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stop:
    layer: str
    reason: str
    message: str = ""
    passed: tuple[str, ...] = ()


Decision = Execute | Reject | NeedsConfirmation | Stop
