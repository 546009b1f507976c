"""Planner outputs and small readers shared by the service tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.state import RunState
from tests.support.planner import tool_call

SUBJECT = "alice"
SEARCH_GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 100}
MEMORY_GRANT = {"capability": "memory:write", "resource_scope": SUBJECT, "expires_at_step": 100}


def search(pid: str, query: str) -> dict[str, Any]:
    return tool_call(pid, "search_public", {"query": query})


def save_language(pid: str, value: str) -> dict[str, Any]:
    return tool_call(pid, "save_preference", {"key": "answer_language", "value": value})


def create_run(
    outputs: Sequence[Any],
    grants: Sequence[dict[str, Any]] = (SEARCH_GRANT,),
    *,
    max_steps: int = 8,
    max_tool_calls: int = 4,
) -> RunState:
    return services.run_create(
        subject=SUBJECT,
        goal="What happens after the retries are exhausted?",
        budgets=RunBudgets(
            max_steps=max_steps,
            max_tool_calls=max_tool_calls,
            max_repeated_proposal=2,
            deadline_ms=600_000,
        ),
        grants=list(grants),
        planner={"kind": "fixture", "outputs": list(outputs)},
    )


def trace(run_id: str) -> list[tuple[int, str]]:
    return list(
        m.TraceEvent.objects.filter(run_id=run_id)
        .order_by("sequence")
        .values_list("sequence", "event")
    )
