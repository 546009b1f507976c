"""alice's values copied into every place ``runs.privacy.erasure_places.ERASED`` names (issue 9 item
11, issue 21 item 3), for the erase tests: what her runs store, what people typed about them, and
what tools said back.

``held(place, column)`` reads a place the way the erase finds it (``Place.rows``), so a test that
asks it about every entry of ``ERASED`` is derived from the list the erase rewrites.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentconsole import wiring
from bench.support.slow_model import SlowModel
from memory.services import preference_propose_edit, preference_revoke
from runs import models as m
from runs import selectors, services
from runs.domain.budgets import RunBudgets
from runs.people import answers
from runs.people.handoffs import handoff_claim, handoff_resolve
from runs.privacy.erasure_places import Place
from tests.memory.memory_kit import confirmed_write
from tests.support import quoting_tools
from tests.support.db_scan import as_text
from tests.support.planner import tool_call
from tests.support.runs import load_demo_corpus

OLD, CURRENT, IN_FLIGHT = "tlh-Qapla", "tlh-Klingon", "tlh-Vulcan"
ERASED = (OLD, CURRENT, IN_FLIGHT)
MODEL_ENDPOINT = "erase-model"
GOAL = f"answer in {CURRENT} please, as before ({OLD})"
ALL_GRANTS = [
    {"capability": "search:public", "resource_scope": "public", "expires_at_step": 20},
    {"capability": "memory:write", "resource_scope": "{subject}", "expires_at_step": 20},
]
# A grant whose constraint quotes her value, and the tool that quotes its argument back.
TOOL_GRANTS = [
    {
        "capability": "artifact:write",
        "resource_scope": "run-output",
        "expires_at_step": 20,
        "constraints": {"path": {"prefix": f"run-output/{CURRENT}/"}},
    },
    {"capability": quoting_tools.CAPABILITY, "resource_scope": "*", "expires_at_step": 20},
]


@pytest.fixture
def model_endpoint(settings: Any) -> Iterator[None]:
    """The slow model server (bench.support.slow_model) as the endpoint of alice's model-planned
    run."""
    server = SlowModel(delay_s=0.01).start()
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {
        MODEL_ENDPOINT: {"base_url": server.base_url, "model": "slow", "timeout_s": 5}
    }
    yield
    server.stop()


@pytest.fixture
def quoting_tool(settings: Any, tmp_path: Path) -> Iterator[None]:
    """``check_language`` registered (tests/support/quoting_tools.py), artifacts under tmp."""
    settings.AGENTCONSOLE_TOOLS = ["tests.support.quoting_tools"]
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = tmp_path
    wiring.registry.cache_clear()  # the root builds the registry once; this test adds a tool
    quoting_tools.CALLED.clear()
    yield
    wiring.registry.cache_clear()


def save(pid: str, value: str, expected: int | None = None) -> dict[str, Any]:
    arguments: dict[str, Any] = {"key": "answer_language", "value": value}
    if expected is not None:
        arguments["expected_version"] = expected
    return tool_call(pid, "save_preference", arguments)


def run(
    subject: str,
    outputs: list[dict[str, Any]],
    *,
    max_steps: int = 8,
    grants: list[dict[str, Any]] = ALL_GRANTS,
) -> str:
    state = services.run_create(
        subject=subject,
        goal=GOAL,
        budgets=RunBudgets(
            max_steps=max_steps, max_tool_calls=6, max_repeated_proposal=3, deadline_ms=600_000
        ),
        grants=[
            {**g, "resource_scope": g["resource_scope"].format(subject=subject)} for g in grants
        ],
        planner={"kind": "fixture", "outputs": outputs},
    )
    services.run_advance(run_id=state.run_id)
    return state.run_id


def decide(run_id: str, *, approved: bool, by: Any = "t", reason: str = "") -> None:
    pending = selectors.confirmation_get(
        confirmation_id=m.Run.objects.get(pk=run_id).pending_confirmation_id
    )
    services.confirmation_decide(
        confirmation_id=pending.pk,
        approved=approved,
        shown_hash=pending.proposal_hash,
        by=by,
        reason=reason,
    )
    services.run_advance(run_id=run_id)


def edit(run_id: str, *, by: Any, value: str) -> None:
    """``by`` edits the value of the run's waiting save, which approves the edited call."""
    pending = selectors.confirmation_get(
        confirmation_id=m.Run.objects.get(pk=run_id).pending_confirmation_id
    )
    edited = {**pending.proposal["arguments"], "value": value}
    answers.confirmation_edit(
        confirmation_id=pending.pk,
        shown_hash=pending.proposal_hash,
        arguments=edited,
        by=by,
        reason=f"{value}, not the other",
    )
    services.run_advance(run_id=run_id)


def write_alice_memory() -> None:
    for value, expected in ((OLD, None), (CURRENT, 1)):
        confirmed_write("alice", "answer_language", value, expected, confirmation_id="user-set")


@dataclass(frozen=True)
class Alice:
    runs: dict[str, str]

    @property
    def run_ids(self) -> list[str]:
        return list(self.runs.values())


def alice_everywhere(users: dict[str, Any]) -> Alice:
    """alice's memory and runs, with her values in every place a run or a person stores text."""
    write_alice_memory()
    load_demo_corpus()
    search = tool_call("p1", "search_public", {"query": f"{CURRENT} grammar"})
    runs = {
        # search (ledger, observation, trace arg), a save she approves that conflicts (the
        # rejection carries current and proposed value), a save an operator declines, an answer.
        "done": run(
            "alice",
            [
                search,
                save("p2", CURRENT, expected=1),
                save("p3", OLD),
                {
                    "kind": "final",
                    "answer": f"Use {CURRENT}.",
                    "citation_observation_ids": ["tool-1"],
                },
            ],
        ),
        # waiting for her confirmation: pending proposal and a pending confirmation row.
        "waiting": run("alice", [save("p1", CURRENT, expected=2)]),
        # out of steps: a handoff bundle with the goal in its last observations.
        "handed": run("alice", [search, search], max_steps=1),
        "tools": _tools_run(),
        "model": _model_run(),
        # a save she edits before approving it (issue 24 item 1): the edit's diff holds both.
        "edited": run("alice", [save("p1", OLD, expected=2)]),
    }
    decide(runs["done"], approved=True, by=users["alice"], reason=f"yes, {CURRENT} again")
    decide(runs["done"], approved=False, by=users["operator"], reason=f"{OLD} is retired")
    _retry_the_unsure_call(runs["tools"], users["operator"])
    edit(runs["edited"], by=users["alice"], value=CURRENT)
    preference_revoke(
        subject="alice", key="answer_language", by=users["alice"], reason=f"not {CURRENT}"
    )
    preference_propose_edit(
        subject="alice",
        key="answer_language",
        value=IN_FLIGHT,
        expected_version=2,
        by=users["alice"],
    )
    return Alice(runs)


def _tools_run() -> str:
    """An artifact under a path with her value, a tool's code quoting it, and an unknown
    outcome that hands the run off."""
    check = quoting_tools.NAME
    return run(
        "alice",
        [
            tool_call(
                "p1", "write_artifact", {"path": f"run-output/{CURRENT}/notes.md", "content": "-"}
            ),
            tool_call("p2", check, {"text": CURRENT, "mode": "reject"}),
            tool_call("p3", check, {"text": CURRENT, "mode": "unsure"}),
        ],
        grants=ALL_GRANTS + TOOL_GRANTS,
    )


def _model_run() -> str:
    """A model-planned run, split at its calls (issue 22): her goal in each recorded request,
    the model's search for it in each recorded reply."""
    state = services.run_create(
        subject="alice",
        goal=f"What does {CURRENT} mean?",
        budgets=RunBudgets(max_steps=4),
        grants=ALL_GRANTS,
        planner={"kind": "openai", "endpoint": MODEL_ENDPOINT},
    )
    for _ in range(3):  # request, reply → search → request, reply → answer
        wiring.runner(defer_calls=True).advance(state.run_id)
        asyncio.run(wiring.gateway().run_until_idle())
    wiring.runner(defer_calls=True).advance(state.run_id)
    return state.run_id


def _retry_the_unsure_call(run_id: str, reviewer: Any) -> None:
    """A reviewer retries under the same token with a reason quoting the value: the ledger's
    verification keeps the reason, the resolution the tool's (quoting) code."""
    handoff = m.Handoff.objects.get(run_id=run_id)
    handoff_claim(handoff_id=handoff.pk, by=reviewer)
    handoff_resolve(
        handoff_id=handoff.pk, by=reviewer, action="retry_same_token", reason=f"is {CURRENT} real?"
    )


def held(place: Place, column: str, *, run_ids: list[str]) -> list[str]:
    """The erased values still in ``column`` of alice's rows of ``place``."""
    rows = place.rows(subject="alice", run_ids=run_ids).values_list(column, flat=True)
    return [v for value in rows for v in ERASED if v in (as_text(value) or "")]
