"""A scripted final answer that depends on what a step came to (runs.domain.planning.as_seen,
issue 21 item 2): the demo's planner must not claim an effect it did not get. The fixture planner
reads its view as a model would: the step's tool result, or the gate's rejection."""

from __future__ import annotations

from typing import Any

import pytest

from runs.demo.demo_planner import failed
from runs.demo.demo_planner import final as demo_final
from runs.domain.planning import NOT_SEEN, PlannerContext, as_seen


def _context(*items: dict[str, Any]) -> PlannerContext:
    return PlannerContext(goal="g", step=3, observations=list(items))


def _item(source: str, content: str, kind: str = "observation") -> dict[str, Any]:
    step = int(source.rsplit("-", 1)[1])
    return {"kind": kind, "content": content, "source_ids": [source], "created_at_step": step}


SAVED = demo_final("Saved.", ["tool-1"], unless=failed(2, "Could not save citation_style: {code}."))


@pytest.mark.parametrize(
    ("items", "answer"),
    [
        ([_item("tool-2", '{"status": "succeeded", "tool": "kv_put"}')], "Saved."),
        (
            [_item("tool-2", '{"code": "PREFERENCE_VERSION_CONFLICT", "status": "rejected"}')],
            "Could not save citation_style: PREFERENCE_VERSION_CONFLICT.",
        ),
        (
            [_item("policy-2", '{"code": "CONFIRMATION_DECLINED", "layer": "confirmation"}')],
            "Could not save citation_style: CONFIRMATION_DECLINED.",
        ),
        ([_item("tool-2", '{"status": "failed"}')], "Could not save citation_style: FAILED."),
        # Nothing of step 2 in view (or not readable): no claim without evidence.
        (
            [_item("tool-1", '{"status": "succeeded"}')],
            f"Could not save citation_style: {NOT_SEEN}.",
        ),
        ([_item("tool-2", '{"status": "succ…')], f"Could not save citation_style: {NOT_SEEN}."),
        # A code that is no code is not echoed into the answer.
        (
            [_item("tool-2", '{"code": "<b>hi</b>", "status": "rejected"}')],
            "Could not save citation_style: REJECTED.",
        ),
    ],
)
def test_a_scripted_final_says_what_the_step_came_to(
    items: list[dict[str, Any]], answer: str
) -> None:
    out = as_seen(dict(SAVED), _context(*items))
    assert out == {"kind": "final", "answer": answer, "citation_observation_ids": ["tool-1"]}


def test_a_malformed_branch_is_left_for_the_gate_to_refuse() -> None:
    bad = {"kind": "final", "answer": "x", "citation_observation_ids": [], "if_step_failed": {}}
    assert as_seen(dict(bad), _context()) == bad
