"""A user's erase reaches every copy of their values (issue 9 item 11): the goal, the planner
configuration, proposals, confirmations, the ledger, observations, working memory, the answer,
handoff bundles and trace details of their runs, and their edits in flight. Afterwards a search
of every table of the database finds the values only in another subject's run, which the erase
did not touch. Hashes stay as they were, for the audit."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps

from agentconsole import wiring
from memory.models import PreferenceHistory, PreferenceRecord, WorkingMemoryItem
from memory.services import preference_propose_edit, preferences_erase
from policy.domain.canonical import content_hash
from policy.models import Confirmation
from runs import models as m
from runs import selectors, services
from runs.domain import lifecycle
from runs.domain.budgets import RunBudgets
from runs.domain.errors import VersionConflict
from tests.memory.memory_kit import confirmed_write
from tests.support.db_scan import Hit, scan
from tests.support.planner import tool_call
from tests.support.runs import load_demo_corpus

pytestmark = pytest.mark.django_db(transaction=True)

OLD, CURRENT, IN_FLIGHT = "tlh-Qapla", "tlh-Klingon", "tlh-Vulcan"
ERASED = (OLD, CURRENT, IN_FLIGHT)
GOAL = f"answer in {CURRENT} please, as before ({OLD})"
ALL_GRANTS = [
    {"capability": "search:public", "resource_scope": "public", "expires_at_step": 20},
    {"capability": "memory:write", "resource_scope": "{subject}", "expires_at_step": 20},
]


def _save(pid: str, value: str, expected: int | None = None) -> dict[str, Any]:
    arguments: dict[str, Any] = {"key": "answer_language", "value": value}
    if expected is not None:
        arguments["expected_version"] = expected
    return tool_call(pid, "save_preference", arguments)


def _run(subject: str, outputs: list[dict[str, Any]], *, max_steps: int = 8) -> str:
    grants = [
        {**g, "resource_scope": g["resource_scope"].format(subject=subject)} for g in ALL_GRANTS
    ]
    state = services.run_create(
        subject=subject,
        goal=GOAL,
        budgets=RunBudgets(
            max_steps=max_steps, max_tool_calls=6, max_repeated_proposal=3, deadline_ms=600_000
        ),
        grants=grants,
        planner={"kind": "fixture", "outputs": outputs},
    )
    services.run_advance(run_id=state.run_id)
    return state.run_id


def _decide(run_id: str, *, approved: bool) -> None:
    pending = selectors.confirmation_get(
        confirmation_id=m.Run.objects.get(pk=run_id).pending_confirmation_id
    )
    services.confirmation_decide(
        confirmation_id=pending.pk, approved=approved, shown_hash=pending.proposal_hash, by="t"
    )
    services.run_advance(run_id=run_id)


def _owner(hit: Hit) -> str:
    """The run id (or subject) a row belongs to."""
    (model,) = [
        x for x in apps.get_models(include_auto_created=True) if x._meta.db_table == hit.table
    ]
    row = model._base_manager.get(pk=hit.pk)
    if model is m.Run:
        return row.pk
    return getattr(row, "run_id", None) or getattr(row, "subject", "?")


def _alice_everywhere(users: dict[str, Any]) -> dict[str, str]:
    """alice's runs put her values into every place a run stores text; one her edit in flight."""
    load_demo_corpus()
    search = tool_call("p1", "search_public", {"query": f"{CURRENT} grammar"})
    runs = {
        # search (ledger, observation, trace arg), a save she approves that conflicts (the
        # rejection carries current and proposed value), a save she declines, a final answer.
        "done": _run(
            "alice",
            [
                search,
                _save("p2", CURRENT, expected=1),
                _save("p3", OLD),
                {
                    "kind": "final",
                    "answer": f"Use {CURRENT}.",
                    "citation_observation_ids": ["tool-1"],
                },
            ],
        ),
        # waiting for her confirmation: pending proposal and a pending confirmation row.
        "waiting": _run("alice", [_save("p1", CURRENT, expected=2)]),
        # out of steps: a handoff bundle with the goal in its last observations.
        "handed": _run("alice", [search, search], max_steps=1),
    }
    _decide(runs["done"], approved=True)
    _decide(runs["done"], approved=False)
    preference_propose_edit(
        subject="alice",
        key="answer_language",
        value=IN_FLIGHT,
        expected_version=2,
        by=users["alice"],
    )
    return runs


def _write_alice_memory() -> None:

    for value, expected in ((OLD, None), (CURRENT, 1)):
        confirmed_write("alice", "answer_language", value, expected, confirmation_id="user-set")


def test_an_erase_leaves_the_values_in_no_table_but_another_subjects(users) -> None:
    """issue 9 item 11: before the fix the goal, the answer, observations, ledger arguments,
    confirmation proposals, working memory, handoff bundles and trace details of alice's runs
    still held her erased values."""
    _write_alice_memory()
    runs = _alice_everywhere(users)
    bobs = _run("bob", [tool_call("p1", "search_public", {"query": f"{CURRENT} grammar"})])
    done = runs["done"]
    assert m.Run.objects.get(pk=done).status == "completed"
    assert m.Run.objects.get(pk=runs["waiting"]).status == "waiting_confirmation"
    assert m.Handoff.objects.filter(run_id=runs["handed"]).exists()
    # The places are really filled before the erase (else the search below proves nothing).
    places = {(h.table, h.column) for h in scan(CURRENT) if _owner(h) in runs.values()}
    for place in [
        ("runs_run", "goal"),
        ("runs_run", "answer"),
        ("runs_run", "planner"),
        ("runs_run", "pending_proposal"),
        ("runs_observation", "content"),
        ("runs_ledgerentry", "arguments"),
        ("runs_traceevent", "details"),
        ("runs_handoff", "bundle"),
        ("policy_confirmation", "proposal"),
        ("memory_workingmemoryitem", "content"),
    ]:
        assert place in places, place
    bob_before = selectors.run_export(run_id=bobs)
    hashes_before = _hashes(done)

    assert preferences_erase(subject="alice", by=users["alice"]) == 1

    for value in ERASED:
        leftovers = [str(h) for h in scan(value) if _owner(h) not in (bobs, "bob")]
        assert leftovers == [], f"{value} survives the erase"
    # bob's run, holding the same value, is untouched.
    assert selectors.run_export(run_id=bobs) == bob_before
    assert CURRENT in m.Run.objects.get(pk=bobs).goal
    # The audit: every stored hash is as it was; the tombstones say where a value stood.
    assert _hashes(done) == hashes_before
    assert "[erased:hmac-sha256:" in m.Run.objects.get(pk=done).goal
    assert set(
        PreferenceHistory.objects.filter(subject="alice").values_list("value", flat=True)
    ) == {None}
    # By design, re-hashing tombstoned content does not give the stored hash back.
    user_request = m.Observation.objects.get(run_id=done, observation_id="user-1")
    assert content_hash(user_request.content) != user_request.content_hash
    erased_events = m.TraceEvent.objects.filter(run_id=done, event="run.values-erased")
    assert [e.details for e in erased_events] == [{"by": "alice"}]


def _hashes(run_id: str) -> dict[str, Any]:
    return {
        "observations": list(
            m.Observation.objects.filter(run_id=run_id).values_list(
                "observation_id", "content_hash"
            )
        ),
        "ledger": list(
            m.LedgerEntry.objects.filter(run_id=run_id).values_list(
                "idempotency_token", "arguments_hash", "proposal_hash"
            )
        ),
        "confirmations": list(
            Confirmation.objects.filter(run_id=run_id).values_list("pk", "proposal_hash")
        ),
    }


def test_a_write_in_flight_cannot_bring_an_erased_value_back(users) -> None:
    """issue 9 item 11: a step decided on the run before the erase fails its compare-and-set;
    a confirmation approved after the erase approves the tombstone, never the value."""
    _write_alice_memory()
    load_demo_corpus()
    waiting = _run("alice", [_save("p1", CURRENT, expected=2)])
    store = wiring.store()
    stale = lifecycle.request_cancel(store.load(waiting), by="t", reason="", active_tool=False)

    preferences_erase(subject="alice", by=users["alice"])

    with pytest.raises(VersionConflict):
        store.apply(stale)  # it would have written the old pending proposal back
    _decide(waiting, approved=True)
    assert not PreferenceRecord.objects.filter(subject="alice").exists()
    assert [str(h) for h in scan(CURRENT)] == []
    assert not WorkingMemoryItem.objects.filter(content__contains=CURRENT).exists()
