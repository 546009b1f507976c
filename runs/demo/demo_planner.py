"""The fixture planner's proposals as JSON data, for the demo's runs (``runs.demo.demo_runs``) and
its run profiles (``runs.demo.demo_profiles``): one shape of a tool call and of a final answer."""

from __future__ import annotations

from typing import Any

from runs.domain.planning import IF_STEP_FAILED


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


def final(answer: str, cites: list[str], *, unless: dict[str, Any] | None = None) -> dict[str, Any]:
    """The final answer, citing the observations ``cites``; with ``unless`` (``failed``), the
    answer it gives instead when the planner sees that a step's call did not succeed."""
    out = {"kind": "final", "answer": answer, "citation_observation_ids": cites}
    return {**out, IF_STEP_FAILED: unless} if unless else out


def failed(step: int, answer: str, cites: list[str] | None = None) -> dict[str, Any]:
    """What a final answer says instead if step ``step``'s call did not succeed: ``answer``, in
    which ``{code}`` becomes the code the planner saw (``PREFERENCE_VERSION_CONFLICT``, say),
    citing ``cites`` (the same as the answer's when None). A demo claims no effect it did not
    get (runs.domain.planning.as_seen)."""
    out: dict[str, Any] = {"step": step, "answer": answer}
    return {**out, "citation_observation_ids": cites} if cites is not None else out
