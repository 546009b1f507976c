"""The fixture planner's proposals as JSON data, for the demo's runs (``runs.demo_runs``) and its
run profiles (``runs.demo_profiles``): one shape of a tool call and of a final answer."""

from __future__ import annotations

from typing import Any


def tool(
    pid: str, tool: str, arguments: dict[str, Any], sources: list[str], reason: str = ""
) -> dict[str, Any]:
    """A tool proposal: ``tool`` (version 1) with ``arguments``, citing ``sources``."""
    out = {
        "kind": "tool",
        "proposal_id": pid,
        "tool_name": tool,
        "tool_version": "1",
        "arguments": arguments,
        "source_observation_ids": sources,
    }
    return {**out, "reason_summary": reason} if reason else out


def final(answer: str, cites: list[str]) -> dict[str, Any]:
    """The final answer, citing the observations ``cites``."""
    return {"kind": "final", "answer": answer, "citation_observation_ids": cites}
