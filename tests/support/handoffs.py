"""Runs that end with a handoff, for every test that needs one (API, console pages, browser).

In-process (``handoff_run``, ``unknown_effect_run``): through ``runs.start.scenarios.run_scenario``,
as the API tests always did (``tests.api.api_kit`` re-exports them). Against a live console
(``live_handoff``): the same scenarios through ``manage.py run_fixture`` — the management path the
browser tests already use — so a browser test never depends on what the demo left open.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runs import models as m
from tests.support.runs import load_fixture, scenario_run


@dataclass(frozen=True)
class Handed:
    """A failed run with one open handoff."""

    run_id: str
    handoff_id: int


def budget_handoff_scenario(subject: str, *, goal: str | None = None) -> dict[str, Any]:
    """``s15-unknown-tool`` cut to one step: the registry rejects the first proposal and the
    step budget (1) is then exhausted, so the run fails with MAX_STEPS_REACHED and opens a
    handoff. No tool runs, so no tool thread needs a committed database."""
    data = copy.deepcopy(load_fixture("scenarios/s15-unknown-tool.json"))
    data["subject"] = subject
    data["budgets"]["max_steps"] = 1
    if goal is not None:
        data["goal"] = goal
    return data


def unknown_effect_scenario(subject: str, *, goal: str | None = None) -> dict[str, Any]:
    """faultlab/verification-failed: write_artifact wrote, the file was changed behind its
    back, the ledger row is compensation-required and the bundle names it with its token.
    Needs AGENTCONSOLE_FAULTS_ENABLED and, in-process, a committed database (a tool thread)."""
    data = copy.deepcopy(load_fixture("faultlab/verification-failed.json"))
    data["subject"] = subject
    if goal is not None:
        data["goal"] = goal
    return data


def _handed(data: dict[str, Any], owner: Any, stop_reason: str) -> Handed:
    export = scenario_run(data, owner)
    assert export["state"]["stop_reason"] == stop_reason, export["state"]
    handoff = m.Handoff.objects.get(run_id=export["state"]["run_id"])
    assert handoff.status == "open"
    return Handed(run_id=export["state"]["run_id"], handoff_id=handoff.pk)


def handoff_run(owner: Any, *, goal: str | None = None) -> Handed:
    """A run of ``owner`` failed with MAX_STEPS_REACHED and an open handoff (no effect)."""
    return _handed(
        budget_handoff_scenario(owner.get_username(), goal=goal), owner, "MAX_STEPS_REACHED"
    )


def unknown_effect_run(owner: Any, *, goal: str | None = None) -> Handed:
    """A run of ``owner`` failed with TOOL_POSTCONDITION_FAILED, its write in doubt."""
    return _handed(
        unknown_effect_scenario(owner.get_username(), goal=goal),
        owner,
        "TOOL_POSTCONDITION_FAILED",
    )


def live_handoff(manage: Callable[..., str], scenario: dict[str, Any]) -> str:
    """Run ``scenario`` on a live console with ``manage.py run_fixture``; the new run's id."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as handle:
        json.dump(scenario, handle, ensure_ascii=False)
        handle.flush()
        out = manage("run_fixture", handle.name, "--json")
    run_id: str = json.loads(out)["state"]["run_id"]
    return run_id
