"""The demo's run profiles (``load_demo``): three ways a user can start a run that does something.

1. ``research`` — read-only: search the public corpus, answer citing the result.
2. ``research-save-preference`` — the same, then propose saving ``citation_style=footnote``
   for the user; a person confirms the exact write (the run waits in the operator queue, and the
   user may decide it for their own run); the answer cites the search result.
3. ``write-report`` — search, then write a short report under ``run-output/reports/``; the
   answer cites the search result and the written artifact.

Each is a fixture planner (the trace marks its outputs as fixture) over the built-in tools, with
grants that cover exactly what its script does. They go through ``profile_create`` like an
operator's, so the domain checks them too.
"""

from __future__ import annotations

from typing import Any

from runs.context import RunsContext
from runs.demo.demo_planner import failed, final, tool
from runs.models import RunProfile
from runs.start import profiles

_SEARCH = tool(
    "p1",
    "search_public",
    {"query": "retry quarantine queue", "limit": 3},
    ["user-1"],
    reason="look up the published retry rules",
)
_SEARCH_GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 8}
_REPORT = (
    "# Retry policy\n\nA task is retried automatically at most three times; after that it "
    "moves to the quarantine queue for a person to look at.\n"
)


DEMO_PROFILES: tuple[dict[str, Any], ...] = (
    {
        "name": "research",
        "description": "Read-only research: searches the public documents and answers with "
        "citations. Changes nothing.",
        "audience": "all",
        "planner": {
            "kind": "fixture",
            "outputs": [
                _SEARCH,
                final(
                    "A task is retried automatically at most three times, then it "
                    "moves to the quarantine queue.",
                    ["tool-1"],
                ),
            ],
        },
        "tools": ["search_public"],
        "grant_templates": [_SEARCH_GRANT],
        "budgets": {
            "max_steps": 4,
            "max_tool_calls": 2,
            "max_repeated_proposal": 2,
            "deadline_s": 120,
        },
    },
    {
        "name": "research-save-preference",
        "description": "Research that may save one preference for you (citation style: "
        "footnote), only after a person confirms that exact write.",
        "audience": "all",
        "planner": {
            "kind": "fixture",
            "outputs": [
                _SEARCH,
                tool(
                    "p2",
                    "save_preference",
                    {"key": "citation_style", "value": "footnote"},
                    ["user-1"],
                    reason="remember how the user likes citations",
                ),
                final(
                    "A task is retried automatically at most three times, then it "
                    "moves to the quarantine queue. Citations as footnotes from now on.",
                    ["tool-1"],
                    # Said only if the planner saw the write succeed (step 2's outcome).
                    unless=failed(
                        2,
                        "A task is retried automatically at most three times, then it "
                        "moves to the quarantine queue. Could not save citation_style="
                        "footnote: {code}.",
                    ),
                ),
            ],
        },
        "tools": ["search_public", "save_preference"],
        "grant_templates": [
            _SEARCH_GRANT,
            {
                "capability": "memory:write",
                "resource_scope": "{subject}",
                "expires_at_step": 8,
                "max_calls": 1,
            },
        ],
        "budgets": {
            "max_steps": 6,
            "max_tool_calls": 3,
            "max_repeated_proposal": 2,
            "deadline_s": 3600,
        },
    },
    {
        "name": "write-report",
        "description": "Writes a short report under run-output/reports/ from the public "
        "documents, and answers citing the report.",
        "audience": "all",
        "planner": {
            "kind": "fixture",
            "outputs": [
                _SEARCH,
                tool(
                    "p2",
                    "write_artifact",
                    {"path": "run-output/reports/retry-policy.md", "content": _REPORT},
                    ["tool-1"],
                    reason="write the report",
                ),
                final(
                    "The report is in run-output/reports/retry-policy.md: a task is "
                    "retried at most three times, then quarantined.",
                    ["tool-1", "tool-2"],
                    unless=failed(
                        2,
                        "A task is retried at most three times, then quarantined. Could not "
                        "write run-output/reports/retry-policy.md: {code}.",
                        ["tool-1"],
                    ),
                ),
            ],
        },
        "tools": ["search_public", "write_artifact"],
        "grant_templates": [
            _SEARCH_GRANT,
            {
                "capability": "artifact:write",
                "resource_scope": "run-output/reports",
                "expires_at_step": 8,
                "max_calls": 2,
                "constraints": {"path": {"prefix": "run-output/reports/"}},
            },
        ],
        "budgets": {
            "max_steps": 5,
            "max_tool_calls": 3,
            "max_repeated_proposal": 2,
            "deadline_s": 120,
        },
    },
)


def load_demo_profiles(*, by: Any, ctx: RunsContext | None = None) -> list[str]:
    """Create the demo profiles that do not exist yet (an operator's edits are kept)."""
    created = []
    for data in DEMO_PROFILES:
        if RunProfile.objects.filter(name=data["name"]).exists():
            continue
        created.append(profiles.profile_create(data=data, by=by, ctx=ctx).name)
    return created
