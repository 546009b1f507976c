"""What a run's writes came to, over the HTTP API (issue 21 item 2): the run's ``writes`` and
``outcome_flag`` in the list and the detail, the list's ``?outcome_flag=`` filter, and the
counts in the ``run.stopped`` event (what the live trace's frames carry too).

Personas (tests/support/personas.py): ``alice`` owns the runs; ``bob`` is a user who sees none of
them, the filter included; ``operator`` sees every run.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.api import api_kit as kit

# The scenarios run their tools in threads with connections of their own: rows must commit.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("corpus")]


READ_ONLY = {
    "subject": "alice",
    "goal": "What happens after the retries are exhausted?",
    "grants": [{"capability": "search:public", "resource_scope": "public", "expires_at_step": 5}],
    "planner": [
        {"kind": "tool", "proposal_id": "p1", "tool_name": "search_public", "tool_version": "1",
         "arguments": {"query": "retry"}, "source_observation_ids": ["user-1"]},
        {"kind": "final", "answer": "Three retries.", "citation_observation_ids": ["tool-1"]},
    ],
}  # fmt: skip


def _run(owner: Any, name: str) -> dict[str, Any]:
    found = READ_ONLY if name == "read-only" else kit.load_fixture(f"scenarios/{name}.json")
    data = copy.deepcopy(found)
    subject = owner.get_username()
    data["subject"] = subject
    for grant in data["grants"]:
        if grant["capability"] == "memory:write":
            grant["resource_scope"] = subject
    return kit.scenario_run(data, owner)["state"]


def test_a_completed_run_whose_write_was_refused_says_so(people: kit.People) -> None:
    """``mem-stale-no-version``: the second save names no version and the tool refuses it
    (PREFERENCE_VERSION_CONFLICT); the run completes. Before issue 21 nothing said so."""
    state = _run(people.alice.user, "mem-stale-no-version")
    assert state["status"] == "completed"
    assert state["writes"] == {"succeeded": 1, "rejected": 1, "failed": 0, "unknown": 0}
    run = kit.assert_ok(people.alice.get(f"/api/runs/{state['run_id']}/"))
    assert run["status"] == "completed"
    assert run["writes"] == {"succeeded": 1, "rejected": 1, "failed": 0, "unknown": 0}
    assert run["outcome_flag"] == "writes_not_applied"
    events = kit.assert_ok(people.alice.get(f"/api/runs/{state['run_id']}/events/"))
    [stopped] = [e for e in events["results"] if e["event"] == "run.stopped"]
    assert stopped["details"] == {
        "status": "completed",
        "reason": "FINAL_ANSWER_VALIDATED",
        "writes_succeeded": 1,
        "writes_rejected": 1,
        "writes_failed": 0,
        "writes_unknown": 0,
        "outcome_flag": "writes_not_applied",
    }


def test_a_run_whose_writes_all_took_effect_is_not_flagged(people: kit.People) -> None:
    state = _run(people.alice.user, "mem-ok")
    run = kit.assert_ok(people.alice.get(f"/api/runs/{state['run_id']}/"))
    assert (run["status"], run["outcome_flag"]) == ("completed", None)
    assert run["writes"]["succeeded"] == 1
    assert run["writes"]["rejected"] == run["writes"]["failed"] == 0


def test_the_list_shows_and_filters_the_flag(people: kit.People) -> None:
    flagged = _run(people.alice.user, "mem-stale-no-version")["run_id"]
    clean = _run(people.alice.user, "read-only")["run_id"]
    injected = _run(people.alice.user, "seed-walkthrough")["run_id"]  # its write was refused
    page = kit.assert_ok(people.alice.get("/api/runs/"))
    shown = {r["run_id"]: (r["outcome_flag"], r["writes"]) for r in page["results"]}
    none = {"succeeded": 0, "rejected": 0, "failed": 0, "unknown": 0}
    assert shown == {
        flagged: ("writes_not_applied", {**none, "succeeded": 1, "rejected": 1}),
        clean: (None, none),
        injected: ("writes_not_applied", {**none, "rejected": 1}),
    }

    only = {"outcome_flag": "writes_not_applied"}
    found = kit.assert_ok(people.alice.get("/api/runs/", only))
    assert [r["run_id"] for r in found["results"]] == [injected, flagged]  # newest first
    # The filter never widens what a caller sees.
    assert kit.assert_ok(people.bob.get("/api/runs/", only))["results"] == []
    with_status = {**only, "status": "failed"}
    assert kit.assert_ok(people.operator.get("/api/runs/", with_status))["results"] == []


def test_the_filter_costs_what_the_plain_list_costs(people: kit.People) -> None:
    _run(people.alice.user, "mem-stale-no-version")
    _run(people.alice.user, "read-only")

    def queries(params: dict[str, str]) -> int:
        with CaptureQueriesContext(connection) as captured:
            kit.assert_ok(people.operator.get("/api/runs/", params))
        return len(captured)

    queries({})  # the operator's first request also reads what later ones find cached
    assert queries({"outcome_flag": "writes_not_applied"}) == queries({})


@pytest.mark.parametrize("value", ["yes", "WRITES_NOT_APPLIED", "clean", ""])
def test_an_unknown_flag_is_a_400(value: str, people: kit.People) -> None:
    if value == "":
        # Empty means no filter, as for the other filters.
        kit.assert_ok(people.alice.get("/api/runs/", {"outcome_flag": value}))
        return
    body = kit.assert_error(
        people.alice.get("/api/runs/", {"outcome_flag": value}), 400, kit.VALIDATION_ERROR
    )
    assert "outcome_flag" in body["extra"]["fields"]
