"""Planner outputs as a fixture planner scripts them (no Django: the domain tests use it too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def tool_call(
    pid: str,
    name: str,
    arguments: dict[str, Any],
    *,
    version: str = "1",
    sources: Sequence[str] | None = ("user-1",),
) -> dict[str, Any]:
    """A tool proposal citing ``sources`` (the user's goal by default; None: no such key, as a
    scenario file may leave it out)."""
    proposal = {
        "kind": "tool",
        "proposal_id": pid,
        "tool_name": name,
        "tool_version": version,
        "arguments": arguments,
    }
    if sources is not None:
        proposal["source_observation_ids"] = list(sources)
    return proposal
