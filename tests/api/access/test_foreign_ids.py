"""issue 9 item 14: a foreign object's id must look exactly like an id that does not exist.

For every route that names an object (runs and their trace, ledger, observations and grants;
confirmations; handoffs; preference changes; a preference key of another subject), a user persona
(bob) gets the same status and the same body for alice's object as for an id nobody has; the only
difference allowed is the id itself where the message repeats it. Otherwise the answer is an
oracle for which ids exist (a 403 for "exists, not yours" next to a 404 for "no such thing").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.api import api_kit as kit
from tests.api.test_matrix import World

pytestmark = pytest.mark.django_db

# (route, how to call it with an id, how to build alice's object's id, an id nobody has)
Send = Callable[[kit.Persona, str], Any]
HASH = {"proposal_hash": "0" * 64}


def _get(template: str) -> Send:
    return lambda p, ident: p.get(template.format(id=ident))


def _post(template: str, body: dict[str, Any]) -> Send:
    return lambda p, ident: p.post(template.format(id=ident), body)


ROUTES: list[tuple[str, Send, Callable[[World], str], str]] = [
    ("GET run", _get("/api/runs/{id}/"), lambda w: w.run.run_id, "run_" + "0" * 32),
    ("POST run cancel", _post("/api/runs/{id}/cancel/", {"reason": "r"}),
     lambda w: w.run.run_id, "run_" + "0" * 32),
    ("GET run events (trace)", _get("/api/runs/{id}/events/"), lambda w: w.run.run_id,
     "run_" + "0" * 32),
    ("GET run observations", _get("/api/runs/{id}/observations/"), lambda w: w.run.run_id,
     "run_" + "0" * 32),
    ("GET run ledger", _get("/api/runs/{id}/ledger/"), lambda w: w.run.run_id,
     "run_" + "0" * 32),
    ("GET run grants", _get("/api/runs/{id}/grants/"), lambda w: w.run.run_id,
     "run_" + "0" * 32),
    ("GET run trace.json", _get("/api/runs/{id}/trace.json"), lambda w: w.run.run_id,
     "run_" + "0" * 32),
    ("GET run trace.ndjson", _get("/api/runs/{id}/trace.ndjson"), lambda w: w.run.run_id,
     "run_" + "0" * 32),
    ("GET confirmation", _get("/api/confirmations/{id}/"), lambda w: w.run.confirmation_id,
     "run_" + "0" * 32 + ":c9"),
    ("POST confirmation approve", _post("/api/confirmations/{id}/approve/", HASH),
     lambda w: w.run.confirmation_id, "run_" + "0" * 32 + ":c9"),
    ("POST confirmation decline", _post("/api/confirmations/{id}/decline/", HASH),
     lambda w: w.run.confirmation_id, "run_" + "0" * 32 + ":c9"),
    ("POST confirmation edit", _post("/api/confirmations/{id}/edit/",
                                     {**HASH, "arguments": {"key": "answer_language"}}),
     lambda w: w.run.confirmation_id, "run_" + "0" * 32 + ":c9"),
    ("POST confirmation respond", _post("/api/confirmations/{id}/respond/",
                                        {**HASH, "note": "n"}),
     lambda w: w.run.confirmation_id, "run_" + "0" * 32 + ":c9"),
    ("GET handoff", _get("/api/handoffs/{id}/"), lambda w: str(w.handoff.handoff_id),
     "999999"),
    ("POST handoff claim", _post("/api/handoffs/{id}/claim/", {}),
     lambda w: str(w.handoff.handoff_id), "999999"),
    ("POST handoff resolve", _post("/api/handoffs/{id}/resolve/",
                                   {"action": "fail", "reason": "r"}),
     lambda w: str(w.handoff.handoff_id), "999999"),
    ("POST preference change apply", _post("/api/preferences/changes/{id}/apply/", HASH),
     lambda w: str(w.change.pk), "999999"),
    # The object is (subject, key): alice's key through ?subject= against a subject nobody is.
    ("POST preference revoke", _post("/api/preferences/citation_style/revoke/?subject={id}",
                                     {"reason": "r"}),
     lambda w: (w.memory, "alice")[1], "nobody-at-all"),
    ("GET preference history", _get("/api/preferences/history/?key=citation_style&subject={id}"),
     lambda w: (w.memory, "alice")[1], "nobody-at-all"),
]  # fmt: skip


def _shape(response: Any, ident: str) -> tuple[int, str, Any]:
    """Status, content type and body, with the asked id replaced by a placeholder."""
    text = response.content.decode("utf-8", "replace").replace(json.dumps(ident)[1:-1], "<id>")
    return response.status_code, response.get("Content-Type", ""), text


@pytest.mark.parametrize(
    ("label", "send", "foreign", "missing"), ROUTES, ids=[r[0] for r in ROUTES]
)
def test_a_foreign_id_answers_like_a_missing_one(
    label: str, send: Send, foreign: Callable[[World], str], missing: str, people: kit.People
) -> None:
    world = World(people)
    foreign_id = foreign(world)
    bob = people.bob
    got_foreign = _shape(send(bob, foreign_id), foreign_id)
    got_missing = _shape(send(bob, missing), missing)
    assert got_foreign == got_missing, f"{label}: {got_foreign} != {got_missing}"
    assert 400 <= got_foreign[0] < 500, got_foreign


def test_every_object_route_is_covered() -> None:
    """A new route with an id in its path needs a row above."""
    from agentconsole import api_urls

    with_id = {str(p.pattern) for p in api_urls.urlpatterns if "<" in str(p.pattern)}
    assert with_id == {
        "runs/<str:run_id>/", "runs/<str:run_id>/cancel/", "runs/<str:run_id>/events/",
        "runs/<str:run_id>/observations/", "runs/<str:run_id>/ledger/",
        "runs/<str:run_id>/grants/", "runs/<str:run_id>/trace.json",
        "runs/<str:run_id>/trace.ndjson", "confirmations/<str:confirmation_id>/",
        "confirmations/<str:confirmation_id>/approve/",
        "confirmations/<str:confirmation_id>/decline/",
        "confirmations/<str:confirmation_id>/edit/",
        "confirmations/<str:confirmation_id>/respond/", "handoffs/<int:handoff_id>/",
        "handoffs/<int:handoff_id>/claim/", "handoffs/<int:handoff_id>/resolve/",
        "preferences/changes/<int:change_id>/apply/", "preferences/<str:key>/revoke/",
        # The MCP catalog belongs to the deployment, not to a person: there is no foreign id,
        # only operators reach these at all (tests/api/test_matrix.py), a missing name is 404.
        "mcp/servers/<str:name>/", "mcp/servers/<str:name>/refresh/",
        "mcp/servers/<str:name>/enabled/", "mcp/servers/<str:name>/tools/<str:tool>/accept/",
    }  # fmt: skip
