"""Every route of agentconsole/api_urls.py for every persona: the status code, and for a refusal the
JSON error body with its stable code.

The target objects belong to alice: for her they are her own, for bob they are foreign, for the
staff roles they are someone else's. Each case runs in a fresh database with a fresh world (the
writes consume their object: a confirmation is decided once, a handoff claimed once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pytest

from memory.models import PreferenceChange
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

PERSONAS = ("anonymous", "alice", "bob", "operator", "reviewer", "admin")

OK, CREATED = 200, 201
DENIED = (403, kit.PERMISSION_DENIED)
HIDDEN = (404, kit.NOT_FOUND)
NOT_OWNED = (403, kit.MEMORY_SCOPE_NOT_OWNED)
NO_PROFILE = (404, kit.PROFILE_NOT_FOUND)  # unknown or not for this user: one answer
EXCLUSIVE = (400, kit.PROFILE_EXCLUSIVE)


class World:
    """Alice's objects, each built on first use (a case pays only for what its route needs)."""

    def __init__(self, people: kit.People) -> None:
        self.people = people
        self.alice = people.alice.user

    @cached_property
    def run(self) -> kit.Waiting:
        """Alice's run, waiting for the confirmation of save_preference."""
        return kit.waiting_run(self.alice)

    @cached_property
    def handoff(self) -> kit.Handed:
        """An open handoff on another (failed) run of alice's."""
        return kit.handoff_run(self.alice)

    @cached_property
    def claimed(self) -> kit.Handed:
        """A handoff claimed by ``reviewer``."""
        handed = kit.handoff_run(self.alice)
        kit.assert_ok(self.people.reviewer.post(f"/api/handoffs/{handed.handoff_id}/claim/"))
        return handed

    @cached_property
    def memory(self) -> None:
        """Alice's citation_style=inline (version 1)."""
        kit.preference_set(self.alice, "citation_style", "inline")

    @cached_property
    def profiles(self) -> None:
        """Run profiles defined by ``operator``: ``research`` (all users) and ``alices`` (only
        alice may use it)."""
        kit.profile_define(self.people.operator.user, "research")
        kit.profile_define(self.people.operator.user, "alices", audience="users", users=["alice"])

    @cached_property
    def change(self) -> PreferenceChange:
        """Alice's pending edit answer_language=en (not applied yet)."""
        return kit.pending_change(self.alice, "answer_language", "en")


def build_world(people: kit.People) -> World:
    return World(people)


Call = Callable[[kit.Persona, World], Any]
Expect = int | tuple[int, str]


@dataclass(frozen=True)
class Route:
    name: str
    call: Call
    expect: dict[str, Expect]  # persona -> status, or (status, code)
    needs: tuple[str, ...] = ()  # World objects to build before the call (not used by it)


def row(anonymous: Expect, alice: Expect, bob: Expect, operator: Expect, reviewer: Expect,
        admin: Expect) -> dict[str, Expect]:  # fmt: skip
    return dict(zip(PERSONAS, (anonymous, alice, bob, operator, reviewer, admin), strict=True))


ANON = "anonymous-refused"  # NOT_AUTHENTICATED (the status is checked in test_auth.py)
PUBLIC = row(OK, OK, OK, OK, OK, OK)
READ_RUN = row(ANON, OK, HIDDEN, OK, OK, OK)
ALICES_MEMORY = row(ANON, OK, NOT_OWNED, NOT_OWNED, NOT_OWNED, OK)
STAFF_READ = row(ANON, DENIED, DENIED, OK, OK, OK)
REVIEWERS = row(ANON, DENIED, DENIED, DENIED, OK, OK)


def OPERATORS(answer: Expect) -> dict[str, Expect]:  # reads as the rows above
    return row(ANON, DENIED, DENIED, answer, DENIED, answer)


PLANNER = {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]}
GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 3}


def _run(suffix: str = "") -> Call:
    return lambda p, w: p.get(f"/api/runs/{w.run.run_id}/{suffix}")


def _decide(verb: str) -> Route:
    """Approve or decline the waiting run's confirmation, with the hash that was shown (and a
    reason: a decline needs one)."""
    return Route(
        f"POST confirmation {verb}",
        lambda p, w: p.post(
            f"/api/confirmations/{w.run.confirmation_id}/{verb}/",
            {"proposal_hash": w.run.proposal_hash, "reason": "checked by the matrix"},
        ),
        row(ANON, OK, HIDDEN, OK, DENIED, OK),
    )


def _read_alices_memory(name: str, path: str) -> Route:
    return Route(
        f"GET {name} ?subject=alice",
        lambda p, w: p.get(path, {"subject": "alice"}),
        ALICES_MEMORY,
        needs=("memory",),
    )


ROUTES = [
    Route("GET schema", lambda p, w: p.get("/api/schema/"), PUBLIC),
    Route("GET docs", lambda p, w: p.get("/api/docs/"), PUBLIC),
    Route(
        "POST auth/token (own credentials)",
        lambda p, w: p.post(
            "/api/auth/token/",
            {"username": p.username or "alice", "password": kit.PASSWORD},
        ),
        PUBLIC,
    ),
    Route("GET runs", lambda p, w: p.get("/api/runs/"), row(ANON, OK, OK, OK, OK, OK)),
    Route(
        "POST runs (for oneself)",
        lambda p, w: p.post("/api/runs/", {"goal": "g", "planner": PLANNER}),
        row(ANON, CREATED, CREATED, CREATED, CREATED, CREATED),
    ),
    Route(
        "POST runs (subject alice)",
        lambda p, w: p.post("/api/runs/", {"goal": "g", "subject": "alice", "planner": PLANNER}),
        row(ANON, CREATED, DENIED, DENIED, DENIED, CREATED),
    ),
    Route(
        "POST runs (with grants)",
        lambda p, w: p.post("/api/runs/", {"goal": "g", "planner": PLANNER, "grants": [GRANT]}),
        row(ANON, DENIED, DENIED, CREATED, DENIED, CREATED),
    ),
    Route("GET profiles", lambda p, w: p.get("/api/profiles/"), row(ANON, OK, OK, OK, OK, OK)),
    Route(
        "POST runs (profile for all users)",
        lambda p, w: p.post("/api/runs/", {"goal": "g", "profile": "research"}),
        row(ANON, CREATED, CREATED, CREATED, CREATED, CREATED),
        needs=("profiles",),
    ),
    Route(
        "POST runs (profile only alice may use)",
        lambda p, w: p.post("/api/runs/", {"goal": "g", "profile": "alices"}),
        row(ANON, CREATED, NO_PROFILE, NO_PROFILE, NO_PROFILE, NO_PROFILE),
        needs=("profiles",),
    ),
    Route(
        "POST runs (profile and own grants)",
        lambda p, w: p.post("/api/runs/", {"goal": "g", "profile": "research", "grants": [GRANT]}),
        row(ANON, EXCLUSIVE, EXCLUSIVE, EXCLUSIVE, EXCLUSIVE, EXCLUSIVE),
        needs=("profiles",),
    ),
    Route("GET run", _run(), READ_RUN),
    Route(
        "POST run cancel",
        lambda p, w: p.post(f"/api/runs/{w.run.run_id}/cancel/", {"reason": "not needed"}),
        row(ANON, OK, HIDDEN, OK, DENIED, OK),
    ),
    Route("GET run events", _run("events/"), READ_RUN),
    Route("GET run observations", _run("observations/"), READ_RUN),
    Route("GET run ledger", _run("ledger/"), READ_RUN),
    Route("GET run grants", _run("grants/"), READ_RUN),
    # Issue 24 item 5: the trace as a file, for whoever sees the run.
    Route("GET run trace.json", _run("trace.json"), READ_RUN),
    Route("GET run trace.ndjson", _run("trace.ndjson"), READ_RUN),
    Route(
        "GET confirmations",
        lambda p, w: p.get("/api/confirmations/"),
        row(ANON, OK, OK, OK, OK, OK),
    ),
    Route(
        "GET confirmation",
        lambda p, w: p.get(f"/api/confirmations/{w.run.confirmation_id}/"),
        READ_RUN,
    ),
    Route(
        "POST confirmations batch",
        lambda p, w: p.post(
            "/api/confirmations/batch/",
            {
                "proposal_hash": w.run.proposal_hash,
                "confirmation_ids": [w.run.confirmation_id],
                "decision": "approve",
            },
        ),
        OPERATORS(OK),
    ),
    _decide("approve"),
    _decide("decline"),
    # Issue 24 item 1: edit the arguments (an approval of the edited call), respond with a note.
    Route(
        "POST confirmation edit",
        lambda p, w: p.post(
            f"/api/confirmations/{w.run.confirmation_id}/edit/",
            {
                "proposal_hash": w.run.proposal_hash,
                "arguments": {"key": "answer_language", "value": "fr-FR"},
            },
        ),
        row(ANON, OK, HIDDEN, OK, DENIED, OK),
    ),
    Route(
        "POST confirmation respond",
        lambda p, w: p.post(
            f"/api/confirmations/{w.run.confirmation_id}/respond/",
            {"proposal_hash": w.run.proposal_hash, "note": "checked by the matrix"},
        ),
        row(ANON, OK, HIDDEN, OK, DENIED, OK),
    ),
    Route("GET handoffs", lambda p, w: p.get("/api/handoffs/"), STAFF_READ),
    Route(
        "GET handoff",
        lambda p, w: p.get(f"/api/handoffs/{w.handoff.handoff_id}/"),
        STAFF_READ,
    ),
    Route(
        "POST handoff claim",
        lambda p, w: p.post(f"/api/handoffs/{w.handoff.handoff_id}/claim/"),
        REVIEWERS,
    ),
    Route(
        "POST handoff resolve (claimed by reviewer)",
        lambda p, w: p.post(
            f"/api/handoffs/{w.claimed.handoff_id}/resolve/",
            {"action": "fail", "reason": "checked the bundle"},
        ),
        REVIEWERS,
    ),
    # The queue counts are the console badge of operators and reviewers (SPEC §7: pushed to
    # operators); a plain user would learn how many confirmations other users' runs wait for.
    Route("GET queues", lambda p, w: p.get("/api/queues/"), STAFF_READ),
    _read_alices_memory("preferences", "/api/preferences/"),
    Route(
        "POST preference change ?subject=alice",
        lambda p, w: p.post(
            "/api/preferences/changes/?subject=alice",
            {"key": "citation_style", "value": "footnote", "expected_version": 1},
        ),
        row(ANON, CREATED, NOT_OWNED, NOT_OWNED, NOT_OWNED, CREATED),
        needs=("memory",),
    ),
    Route(
        "POST preference change apply (alice's change)",
        lambda p, w: p.post(
            f"/api/preferences/changes/{w.change.pk}/apply/",
            {"proposal_hash": w.change.proposal_hash},
        ),
        # issue 9 item 14: a change is an object with an id; another subject's is NOT_FOUND.
        row(ANON, OK, HIDDEN, HIDDEN, HIDDEN, OK),
    ),
    _read_alices_memory("preference history", "/api/preferences/history/"),
    _read_alices_memory("preference export", "/api/preferences/export/"),
    Route(
        "POST preference erase ?subject=alice",
        lambda p, w: p.post("/api/preferences/erase/?subject=alice", {"confirm": True}),
        ALICES_MEMORY,
        needs=("memory",),
    ),
    Route(
        "POST preference revoke ?subject=alice",
        lambda p, w: p.post(
            "/api/preferences/citation_style/revoke/?subject=alice", {"reason": "no longer"}
        ),
        ALICES_MEMORY,
        needs=("memory",),
    ),
    # The MCP catalog: operators only (tests/mcp has the servers; here no process starts).
    Route("GET mcp servers", lambda p, w: p.get("/api/mcp/servers/"), OPERATORS(OK)),
    Route(
        "POST mcp servers (a command not allowed)",
        lambda p, w: p.post(
            "/api/mcp/servers/", {"name": "x", "transport": "stdio", "command": "/bin/sh"}
        ),
        OPERATORS((400, "MCP_COMMAND_NOT_ALLOWED")),
    ),
    Route("GET mcp server", lambda p, w: p.get("/api/mcp/servers/nope/"), OPERATORS(HIDDEN)),
    Route(
        "POST mcp server refresh",
        lambda p, w: p.post("/api/mcp/servers/nope/refresh/"),
        OPERATORS(HIDDEN),
    ),
    Route(
        "POST mcp server enabled",
        lambda p, w: p.post("/api/mcp/servers/nope/enabled/", {"enabled": False}),
        OPERATORS(HIDDEN),
    ),
    Route(
        "POST mcp tool accept",
        lambda p, w: p.post(
            "/api/mcp/servers/nope/tools/t/accept/",
            {
                "listed_pin": "0" * 64,
                "policy": {"capability": "a:b", "side_effect": "read", "confirmation": "never"},
            },
        ),
        OPERATORS(HIDDEN),
    ),
]

CASES = [
    pytest.param(route, name, id=f"{route.name} as {name}") for route in ROUTES for name in PERSONAS
]


@pytest.mark.parametrize(("route", "who"), CASES)
def test_route_for_persona(route: Route, who: str, people: kit.People) -> None:
    world = build_world(people)
    for name in route.needs:
        getattr(world, name)
    response = route.call(kit.persona(people, who), world)
    expected = route.expect[who]
    if expected == ANON:
        kit.assert_error(response, (401, 403), kit.NOT_AUTHENTICATED)
    elif isinstance(expected, tuple):
        kit.assert_error(response, expected[0], expected[1])
    else:
        assert response.status_code == expected, kit.describe(response)


def test_every_route_is_in_the_matrix() -> None:
    """A route added to api_urls.py without a row here fails this test."""
    from agentconsole import api_urls

    names = {p.name for p in api_urls.urlpatterns}
    covered = {
        "api-schema", "api-docs", "api-token", "api-runs", "api-run", "api-run-cancel",
        "api-run-events", "api-run-observations", "api-run-ledger", "api-run-grants",
        "api-confirmations", "api-confirmation", "api-confirmation-approve",
        "api-confirmation-decline", "api-confirmation-edit", "api-confirmation-respond",
        "api-confirmation-batch",
        "api-run-trace-json", "api-run-trace-ndjson",
        "api-handoffs", "api-handoff", "api-handoff-claim",
        "api-handoff-resolve", "api-queues", "api-preferences", "api-pref-propose",
        "api-pref-apply", "api-pref-history", "api-pref-export", "api-pref-erase",
        "api-pref-revoke", "api-profiles", "api-mcp-servers", "api-mcp-server",
        "api-mcp-server-refresh", "api-mcp-server-enabled", "api-mcp-tool-accept",
    }  # fmt: skip
    # The catch-all that answers unmatched /api/ paths in JSON (tested in test_errors.py).
    assert names - {"api-not-found"} == covered


ROOT_CASES = [
    ("POST runs (subject alice)", CREATED),
    ("POST runs (with grants)", CREATED),
    ("POST confirmation approve", OK),
    ("POST handoff claim", OK),
    ("POST handoff resolve (claimed by reviewer)", OK),
    ("GET preferences ?subject=alice", OK),
    ("POST preference erase ?subject=alice", OK),
]


@pytest.mark.parametrize(("route_name", "status"), ROOT_CASES)
def test_superuser_without_groups_is_admin(
    route_name: str, status: int, people: kit.People
) -> None:
    (route,) = [r for r in ROUTES if r.name == route_name]
    world = build_world(people)
    for name in route.needs:
        getattr(world, name)
    response = route.call(people.root, world)
    assert response.status_code == status, kit.describe(response)


def test_second_reviewer_cannot_resolve_a_claimed_handoff(people: kit.People) -> None:
    world = build_world(people)
    response = people.reviewer2.post(
        f"/api/handoffs/{world.claimed.handoff_id}/resolve/",
        {"action": "fail", "reason": "mine now"},
    )
    kit.assert_error(response, 403, kit.PERMISSION_DENIED)


def test_owner_acts_on_own_objects_the_outsider_gets_not_found(people: kit.People) -> None:
    """The mirror image: bob on his own run succeeds where alice gets NOT_FOUND."""
    bobs = kit.waiting_run(people.bob.user)
    for path in ("", "events/", "observations/", "ledger/", "grants/"):
        kit.assert_ok(people.bob.get(f"/api/runs/{bobs.run_id}/{path}"))
        kit.assert_error(people.alice.get(f"/api/runs/{bobs.run_id}/{path}"), 404, kit.NOT_FOUND)
    kit.assert_error(
        people.alice.get(f"/api/confirmations/{bobs.confirmation_id}/"), 404, kit.NOT_FOUND
    )
    kit.assert_error(
        people.alice.post(
            f"/api/confirmations/{bobs.confirmation_id}/approve/",
            {"proposal_hash": bobs.proposal_hash},
        ),
        404,
        kit.NOT_FOUND,
    )
    kit.assert_error(
        people.alice.post(f"/api/runs/{bobs.run_id}/cancel/", {"reason": "not mine"}),
        404,
        kit.NOT_FOUND,
    )
    kit.assert_ok(
        people.bob.post(
            f"/api/confirmations/{bobs.confirmation_id}/approve/",
            {"proposal_hash": bobs.proposal_hash},
        )
    )
