"""Runs: list (own runs only, filters, cursor pagination), create (grants only by operators and
admins, bound to the new run, enqueued once), detail, cancel (who and why in the trace), trace
events (``?after=``), observations, ledger and grants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from policy.models import Grant
from runs import models as m
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

PLANNER = {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]}
SEARCH_GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 5}


def ids(page: dict[str, Any]) -> list[str]:
    return [r["run_id"] for r in page["results"]]


# --- list ---------------------------------------------------------------------------------------


def test_a_user_lists_only_their_own_runs(people: kit.People) -> None:
    alice_runs = {kit.created_run(people.alice.user), kit.waiting_run(people.alice.user).run_id}
    bob_runs = {kit.created_run(people.bob.user)}
    alice_page = kit.assert_ok(people.alice.get("/api/runs/"))
    assert set(ids(alice_page)) == alice_runs
    assert {r["owner"] for r in alice_page["results"]} == {"alice"}
    assert set(ids(kit.assert_ok(people.bob.get("/api/runs/")))) == bob_runs
    # Even naming bob as the subject does not show his runs to alice.
    assert ids(kit.assert_ok(people.alice.get("/api/runs/", {"subject": "bob"}))) == []
    for staff in (people.operator, people.reviewer, people.admin):
        assert set(ids(kit.assert_ok(staff.get("/api/runs/")))) == alice_runs | bob_runs


def test_list_filters_by_status_subject_and_creation_time(people: kit.People) -> None:
    alice = people.alice.user
    created = kit.created_run(alice)
    waiting = kit.waiting_run(alice).run_id
    for_carol = kit.created_run(alice, subject="carol")
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    for i, run_id in enumerate((created, waiting, for_carol)):
        m.Run.objects.filter(pk=run_id).update(created_at=t0 + timedelta(days=i))
    get = people.alice.get

    assert ids(kit.assert_ok(get("/api/runs/", {"status": "waiting_confirmation"}))) == [waiting]
    assert set(ids(kit.assert_ok(get("/api/runs/", {"status": "created"})))) == {
        created,
        for_carol,
    }
    assert ids(kit.assert_ok(get("/api/runs/", {"status": "completed"}))) == []
    assert ids(kit.assert_ok(get("/api/runs/", {"subject": "carol"}))) == [for_carol]
    # created_after is inclusive, created_before exclusive.
    after = {"created_after": (t0 + timedelta(days=1)).isoformat()}
    assert ids(kit.assert_ok(get("/api/runs/", after))) == [for_carol, waiting]
    before = {"created_before": (t0 + timedelta(days=1)).isoformat()}
    assert ids(kit.assert_ok(get("/api/runs/", before))) == [created]
    window = {
        "created_after": (t0 + timedelta(hours=12)).isoformat(),
        "created_before": (t0 + timedelta(days=1, hours=12)).isoformat(),
        "status": "waiting_confirmation",
        "subject": "alice",
    }
    assert ids(kit.assert_ok(get("/api/runs/", window))) == [waiting]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "sleeping"}, "status"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2030-13-45"}, "created_before"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "201"}, "page_size"),
        ({"page_size": "many"}, "page_size"),
        ({"subject": "s" * 129}, "subject"),
    ],
)
def test_list_refuses_bad_filters(params: dict, field: str, people: kit.People) -> None:
    body = kit.assert_error(people.alice.get("/api/runs/", params), 400, kit.VALIDATION_ERROR)
    assert field in body["extra"]["fields"]


@pytest.mark.parametrize("cursor", ["zzz", "x", "cD0yMDM"])
def test_list_refuses_a_forged_cursor(cursor: str, people: kit.People) -> None:
    kit.assert_error(people.alice.get("/api/runs/", {"cursor": cursor}), 404, kit.NOT_FOUND)


def test_cursor_pagination_follows_next_over_every_run_once(people: kit.People) -> None:
    mine = [kit.created_run(people.alice.user, goal=f"goal {i}") for i in range(5)]
    kit.created_run(people.bob.user)
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    for i, run_id in enumerate(mine):
        # Two runs share a timestamp: the id breaks the tie, so no page repeats or skips one.
        m.Run.objects.filter(pk=run_id).update(created_at=t0 + timedelta(minutes=i // 2))
    seen: list[str] = []
    pages = 0
    url: str | None = "/api/runs/?page_size=2"
    while url:
        page = kit.assert_ok(people.alice.get(url))
        assert len(page["results"]) <= 2
        seen += ids(page)
        url = page["next"]
        pages += 1
    assert pages == 3
    assert sorted(seen) == sorted(mine)
    assert len(seen) == len(set(seen))
    created = [m.Run.objects.get(pk=i).created_at for i in seen]
    assert created == sorted(created, reverse=True)  # newest first


# --- create -------------------------------------------------------------------------------------


def test_create_starts_a_run_for_oneself_and_enqueues_it_once(
    people: kit.People, enqueued: list, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = people.alice.post(
            "/api/runs/",
            {
                "goal": "What happens after retries?",
                "planner": PLANNER,
                "budgets": {"max_steps": 3, "max_tool_calls": 1, "deadline_ms": 60_000},
            },
        )
    run = kit.assert_ok(response, 201)
    assert run["subject"] == "alice"
    assert run["owner"] == "alice"
    assert run["status"] == "created"
    assert (run["step"], run["max_steps"], run["tool_calls"], run["max_tool_calls"]) == (
        0,
        3,
        0,
        1,
    )
    assert run["budgets"]["max_steps"] == 3
    assert enqueued == [run["run_id"]]
    row = m.Run.objects.get(pk=run["run_id"])
    assert row.owner == people.alice.user
    assert [e.event for e in kit.events_of(row.pk)] == ["run.created"]
    assert not Grant.objects.filter(run=row).exists()


def test_a_user_cannot_grant_capabilities(people: kit.People, enqueued: list) -> None:
    before = m.Run.objects.count()
    response = people.alice.post(
        "/api/runs/", {"goal": "g", "planner": PLANNER, "grants": [SEARCH_GRANT]}
    )
    kit.assert_error(response, 403, kit.PERMISSION_DENIED)
    assert m.Run.objects.count() == before
    assert enqueued == []


def test_an_operator_grants_capabilities_bound_to_the_new_run(people: kit.People) -> None:
    other = kit.created_run(people.operator.user)
    response = people.operator.post(
        "/api/runs/",
        {
            "goal": "g",
            "planner": PLANNER,
            "grants": [
                SEARCH_GRANT,
                {
                    "capability": "artifact:write",
                    "resource_scope": "run-output",
                    "expires_at_step": 2,
                    "max_calls": 1,
                },
            ],
        },
    )
    run = kit.assert_ok(response, 201)
    run_id = run["run_id"]
    grants = kit.assert_ok(people.operator.get(f"/api/runs/{run_id}/grants/"))
    assert [(g["capability"], g["resource_scope"], g["expires_at_step"]) for g in grants] == [
        ("search:public", "public", 5),
        ("artifact:write", "run-output", 2),
    ]
    assert grants[1]["max_calls"] == 1
    assert grants[1]["calls_used"] == 0
    rows = list(Grant.objects.filter(run_id=run_id).order_by("id"))
    assert [g.id for g in rows] == [f"{run_id}:g1", f"{run_id}:g2"]
    assert {g.granted_by for g in rows} == {people.operator.user}  # who granted
    assert not Grant.objects.filter(run_id=other).exists()  # bound to the new run only
    (created,) = kit.events_of(run_id, "run.created")
    assert created.details["grants"] == 2


def test_an_admin_starts_a_run_for_another_subject(people: kit.People) -> None:
    run = kit.assert_ok(
        people.admin.post("/api/runs/", {"goal": "g", "planner": PLANNER, "subject": "alice"}),
        201,
    )
    assert (run["subject"], run["owner"]) == ("alice", "admin")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"planner": PLANNER}, "goal"),
        ({"goal": "g"}, "planner"),
        ({"goal": "", "planner": PLANNER}, "goal"),
        ({"goal": "g" * 4001, "planner": PLANNER}, "goal"),
        ({"goal": ["g"], "planner": PLANNER}, "goal"),
        ({"goal": "g", "planner": {"kind": "llm", "outputs": []}}, "planner"),
        ({"goal": "g", "planner": {"kind": "fixture"}}, "planner"),
        ({"goal": "g", "planner": {"kind": "fixture", "outputs": {}}}, "planner"),
        ({"goal": "g", "planner": "fixture"}, "planner"),
        ({"goal": "g", "planner": PLANNER, "budgets": {"max_steps": 0}}, "budgets"),
        ({"goal": "g", "planner": PLANNER, "budgets": {"max_steps": "ten"}}, "budgets"),
        ({"goal": "g", "planner": PLANNER, "budgets": {"max_steps": 10_001}}, "budgets"),
        ({"goal": "g", "planner": PLANNER, "budgets": {"deadline_ms": -1}}, "budgets"),
        ({"goal": "g", "planner": PLANNER, "budgets": {"max_turns": 3}}, "budgets"),
        ({"goal": "g", "planner": PLANNER, "budgets": [1]}, "budgets"),
        ({"goal": "g", "planner": PLANNER, "owner": "bob"}, "owner"),
        ({"goal": "g", "planner": PLANNER, "status": "completed"}, "status"),
        ({"goal": "g", "planner": PLANNER, "subject": ""}, "subject"),
    ],
)
def test_create_refuses_invalid_input(body: dict, field: str | None, people: kit.People) -> None:
    response = people.alice.post("/api/runs/", body)
    error = kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert field in error["extra"]["fields"], error


@pytest.mark.parametrize(
    "grant",
    [
        {"capability": "search:public", "resource_scope": "public"},
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": -1},
        {"capability": "x" * 65, "resource_scope": "public", "expires_at_step": 1},
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 1,
         "max_calls": 0},
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 1,
         "constraints": "none"},
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 1,
         "constraints": {"query": "not-a-constraint"}},
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 1,
         "run_id": "run_elsewhere"},
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 1,
         "constraints": {"query": {"pattern": "(a+)\\1"}}},
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 1,
         "constraints": {"query": {"pattern": "x" * 300}}},
    ],
    ids=["no-expiry", "negative-expiry", "long-capability", "zero-calls", "constraints-str",
         "constraint-shape", "foreign-run-id", "pattern-backreference", "pattern-too-long"],
)  # fmt: skip
def test_operator_grants_are_validated(grant: dict, people: kit.People) -> None:
    before = m.Run.objects.count()
    response = people.operator.post(
        "/api/runs/", {"goal": "g", "planner": PLANNER, "grants": [grant]}
    )
    error = kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert "grants" in error["extra"]["fields"]
    assert m.Run.objects.count() == before


# --- detail -------------------------------------------------------------------------------------


def test_detail_shows_state_budgets_and_counters(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    run = kit.assert_ok(people.alice.get(f"/api/runs/{waiting.run_id}/"))
    assert run["run_id"] == waiting.run_id
    assert run["status"] == "waiting_confirmation"
    assert run["stop_reason"] == "USER_CONFIRMATION_REQUIRED"
    assert run["pending_confirmation_id"] == waiting.confirmation_id
    assert run["version"] == waiting.version
    assert (run["step"], run["max_steps"], run["tool_calls"], run["max_tool_calls"]) == (
        1,
        4,
        0,
        2,
    )
    assert run["max_repeated_proposal"] == 2
    assert run["budgets"] == {
        "max_steps": 4,
        "max_tool_calls": 2,
        "max_repeated_proposal": 2,
        "deadline_ms": 60000,
        "max_tokens": 200_000,  # the default token budget (a fixture planner spends none)
    }
    assert (run["max_tokens"], run["tokens_used"]) == (200_000, 0)
    assert run["answer"] is None
    assert run["citations"] == []


# --- cancel -------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "operator", "admin"])
def test_cancel_records_who_and_why_in_the_trace(who: str, people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    caller = getattr(people, who)
    run = kit.assert_ok(
        caller.post(f"/api/runs/{waiting.run_id}/cancel/", {"reason": f"{who} changed plans"})
    )
    assert run["status"] == "cancelled"
    (requested,) = kit.events_of(waiting.run_id, "run.cancel-requested")
    assert requested.details["by"] == who
    assert requested.details["reason"] == f"{who} changed plans"
    # The confirmation it waited for can no longer be decided.
    response = people.operator.post(
        f"/api/confirmations/{waiting.confirmation_id}/approve/",
        {"proposal_hash": waiting.proposal_hash},
    )
    kit.assert_error(response, 409, kit.CONFIRMATION_NOT_PENDING)


def test_cancel_a_run_no_worker_started_yet(people: kit.People) -> None:
    run_id = kit.created_run(people.alice.user)
    run = kit.assert_ok(people.alice.post(f"/api/runs/{run_id}/cancel/", {"reason": "too slow"}))
    assert run["status"] == "cancelled"
    assert kit.events_of(run_id, "run.cancel-requested")[0].details["by"] == "alice"


def test_cancel_an_ended_run_changes_nothing(people: kit.People) -> None:
    handed = kit.handoff_run(people.alice.user)  # failed
    before = m.Run.objects.get(pk=handed.run_id)
    response = people.alice.post(f"/api/runs/{handed.run_id}/cancel/", {"reason": "late"})
    assert response.status_code in (200, 409), kit.describe(response)
    after = m.Run.objects.get(pk=handed.run_id)
    assert (after.status, after.version) == (before.status, before.version)
    assert kit.events_of(handed.run_id, "run.cancel-requested") == []


@pytest.mark.parametrize(
    "body", [{}, {"reason": ""}, {"reason": "r" * 257}, {"reason": "r", "force": True}]
)
def test_cancel_needs_a_reason(body: dict, people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    kit.assert_error(
        people.alice.post(f"/api/runs/{waiting.run_id}/cancel/", body), 400, kit.VALIDATION_ERROR
    )
    assert m.Run.objects.get(pk=waiting.run_id).status == "waiting_confirmation"


def test_a_reviewer_cannot_cancel_someone_elses_run(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    response = people.reviewer.post(f"/api/runs/{waiting.run_id}/cancel/", {"reason": "r"})
    kit.assert_error(response, 403, kit.PERMISSION_DENIED)
    assert m.Run.objects.get(pk=waiting.run_id).status == "waiting_confirmation"
    assert kit.events_of(waiting.run_id, "run.cancel-requested") == []


# --- events, observations, ledger, grants -------------------------------------------------------


def test_events_after_a_sequence_and_next_after_continues(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    url = f"/api/runs/{waiting.run_id}/events/"
    total = m.TraceEvent.objects.filter(run_id=waiting.run_id).count()
    assert total >= 8

    everything = kit.assert_ok(people.alice.get(url))
    assert [e["sequence"] for e in everything["results"]] == list(range(1, total + 1))
    assert everything["next_after"] is None
    assert everything["results"][0]["event"] == "run.created"
    assert set(everything["results"][0]) == {
        "sequence",
        "event",
        "proposal_id",
        "details",
        "created_at",
        "summary",
        "tone",
    }
    # The console's words for it (runs.domain.console.timeline), as the run page and a live frame
    # say.
    assert everything["results"][0]["summary"].startswith("Run created")

    later = kit.assert_ok(people.alice.get(url, {"after": 5}))
    assert [e["sequence"] for e in later["results"]] == list(range(6, total + 1))

    seen, after = [], 0
    while after is not None:
        page = kit.assert_ok(people.alice.get(url, {"after": after, "limit": 3}))
        assert len(page["results"]) <= 3
        seen += [e["sequence"] for e in page["results"]]
        after = page["next_after"]
    assert seen == list(range(1, total + 1))

    assert kit.assert_ok(people.alice.get(url, {"after": total}))["results"] == []
    assert kit.assert_ok(people.alice.get(url, {"after": 10**6}))["results"] == []


@pytest.mark.parametrize(
    "params",
    [{"after": -1}, {"after": "abc"}, {"after": "1.5"}, {"limit": 0}, {"limit": 201}],
)
def test_events_refuse_bad_parameters(params: dict, people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    kit.assert_error(
        people.alice.get(f"/api/runs/{waiting.run_id}/events/", params), 400, kit.VALIDATION_ERROR
    )


def test_observations_ledger_and_grants_of_a_run(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    base = f"/api/runs/{waiting.run_id}"
    (user_1,) = kit.assert_ok(people.alice.get(f"{base}/observations/"))
    assert user_1["observation_id"] == "user-1"
    assert user_1["trust"] == "user"
    assert user_1["kind"] == "user-request"
    assert user_1["content"] == {"goal": "以后请用中文回答"}
    assert len(user_1["content_hash"]) == 64
    # Nothing ran while the run waits for a person.
    assert kit.assert_ok(people.alice.get(f"{base}/ledger/")) == []
    (grant,) = kit.assert_ok(people.alice.get(f"{base}/grants/"))
    assert (grant["capability"], grant["resource_scope"]) == ("memory:write", "alice")
    assert grant["id"] == f"{waiting.run_id}:g1"
