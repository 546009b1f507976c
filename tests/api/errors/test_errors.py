"""Bad input is a 4xx with the JSON body ``{code, message, extra}``, never a 500 and never an HTML
page: malformed JSON, wrong types, unknown fields, bodies over DATA_UPLOAD_MAX_MEMORY_SIZE (413),
bad ids and bad query parameters, on every route.

Where one product defect shows on many routes, one test walks all of them and reports every
route that failed in its assertion message (one failing test per defect, with the evidence).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings

from runs import models as m
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

PLANNER = {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]}


@dataclass(frozen=True)
class Write:
    """A write route with a valid body; ``caller`` is a persona allowed to call it."""

    name: str
    caller: str
    path: Callable[[kit.People], str]
    body: dict[str, Any]


class Targets:
    """Objects the write routes act on (built on first use)."""

    def __init__(self, people: kit.People) -> None:
        self.people = people
        self._waiting: kit.Waiting | None = None
        self._handoff: kit.Handed | None = None
        self._change: Any = None

    @property
    def waiting(self) -> kit.Waiting:
        if self._waiting is None:
            self._waiting = kit.waiting_run(self.people.alice.user)
        return self._waiting

    @property
    def handoff(self) -> kit.Handed:
        if self._handoff is None:
            self._handoff = kit.handoff_run(self.people.alice.user)
        return self._handoff

    @property
    def change(self) -> Any:
        if self._change is None:
            self._change = kit.pending_change(self.people.alice.user, "answer_language", "en")
        return self._change


WRITES = [
    Write("auth/token", "anonymous", lambda t: "/api/auth/token/",
          {"username": "alice", "password": kit.PASSWORD}),
    Write("runs create", "operator", lambda t: "/api/runs/", {"goal": "g", "planner": PLANNER}),
    Write("run cancel", "alice", lambda t: f"/api/runs/{t.waiting.run_id}/cancel/",
          {"reason": "r"}),
    Write("confirmation approve", "operator",
          lambda t: f"/api/confirmations/{t.waiting.confirmation_id}/approve/",
          {"proposal_hash": "0" * 64}),
    Write("confirmation decline", "operator",
          lambda t: f"/api/confirmations/{t.waiting.confirmation_id}/decline/",
          {"proposal_hash": "0" * 64}),
    Write("handoff claim", "reviewer", lambda t: f"/api/handoffs/{t.handoff.handoff_id}/claim/",
          {}),
    Write("handoff resolve", "reviewer",
          lambda t: f"/api/handoffs/{t.handoff.handoff_id}/resolve/",
          {"action": "fail", "reason": "r"}),
    Write("preference propose", "alice", lambda t: "/api/preferences/changes/",
          {"key": "answer_language", "value": "en"}),
    Write("preference apply", "alice",
          lambda t: f"/api/preferences/changes/{t.change.pk}/apply/",
          {"proposal_hash": "0" * 64}),
    Write("preference erase", "alice", lambda t: "/api/preferences/erase/", {"confirm": True}),
    Write("preference revoke", "alice", lambda t: "/api/preferences/answer_language/revoke/",
          {"reason": "r"}),
]  # fmt: skip

WRITE_IDS = [w.name for w in WRITES]


def caller(people: kit.People, write: Write) -> kit.Persona:
    assert people.alice.user  # the token route logs alice in: she must exist
    if write.caller == "anonymous":
        return people.anonymous
    return getattr(people, write.caller)


def send(people: kit.People, write: Write, body: bytes | str, content_type: str) -> Any:
    """POST ``body`` to ``write``'s route, on this test's objects (built once per test)."""
    targets = people.__dict__.setdefault("error_targets", Targets(people))
    return caller(people, write).post_raw(write.path(targets), body, content_type)


def problems(results: list[tuple[str, Any]], status: int | tuple[int, ...], code: str) -> list[str]:
    """The (label, response) pairs that are not the expected JSON error."""
    out = []
    for label, response in results:
        try:
            kit.assert_error(response, status, code)
        except AssertionError:
            out.append(f"{label}: {kit.describe(response)[:200]}")
    return out


# --- bodies ---------------------------------------------------------------------------------


BAD_JSON = {
    "truncated": b'{"goal": "g",',
    "not-json": b"goal=g",
    "single-quotes": b"{'goal': 'g'}",
    "trailing-comma": b'{"goal": "g",}',
    "nan": b'{"goal": NaN}',
    "infinity": b'{"goal": Infinity}',
    "bad-utf8": b'{"goal": "\xff\xfe"}',
    "utf16": '{"goal": "g"}'.encode("utf-16"),
    "huge-integer": b'{"goal": ' + b"9" * 5000 + b"}",
    # issue 21 item 8: a key twice has no one meaning (DRF kept the last: a run with "second").
    "duplicate-key": b'{"goal": "first", "goal": "second"}',
    "duplicate-nested-key": b'{"goal": "g", "planner": {"kind": "fixture", "kind": "openai"}}',
    "overflow-to-infinity": b'{"goal": 1e999}',
}


NOT_OBJECTS = ["[1, 2]", '"a string"', "42", "true", '[{"goal": "g"}]']
MEDIA_TYPES = [
    "text/plain",
    "application/xml",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
]


@pytest.mark.parametrize("write", WRITES, ids=WRITE_IDS)
def test_malformed_json_is_malformed_request(write: Write, people: kit.People) -> None:
    results = [
        (kind, send(people, write, body, "application/json")) for kind, body in BAD_JSON.items()
    ]
    bad = problems(results, 400, kit.MALFORMED_REQUEST)
    assert not bad, "\n".join(bad)


def test_a_key_twice_is_refused_and_nothing_is_created(people: kit.People) -> None:
    """issue 21 item 8, the instance: ``{"goal":"first","goal":"second"}`` made a run with the
    goal "second"; a reader that keeps the first key would have seen "first"."""
    body = '{"goal": "first", "goal": "second", "planner": ' + json.dumps(PLANNER) + "}"
    response = people.alice.post_raw("/api/runs/", body, "application/json")
    error = kit.assert_error(response, 400, kit.MALFORMED_REQUEST)
    assert error["extra"] == {"reason": "DUPLICATE_JSON_KEY", "key": "goal"}
    assert not m.Run.objects.exists()


@pytest.mark.parametrize("write", WRITES, ids=WRITE_IDS)
def test_a_body_that_is_not_an_object_is_a_validation_error(
    write: Write, people: kit.People
) -> None:
    results = [(body, send(people, write, body, "application/json")) for body in NOT_OBJECTS]
    bad = problems(results, 400, kit.VALIDATION_ERROR)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("write", WRITES[1:], ids=WRITE_IDS[1:])
def test_other_media_types_are_refused(write: Write, people: kit.People) -> None:
    """The API speaks JSON only (the token endpoint also takes forms, as DRF ships it)."""
    results = []
    for content_type in MEDIA_TYPES:
        body = "goal=g" if "form" in content_type else json.dumps(write.body)
        results.append((content_type, send(people, write, body, content_type)))
    bad = problems(results, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("write", WRITES[1:], ids=WRITE_IDS[1:])
def test_unknown_fields_are_refused(write: Write, people: kit.People) -> None:
    body = {**write.body, "unexpected_field": 1}
    response = send(people, write, json.dumps(body), "application/json")
    error = kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert error["extra"]["fields"]["unexpected_field"] == ["Unknown field."]


def test_the_token_endpoint_refuses_unknown_fields(people: kit.People) -> None:
    """Same rule as every other write (StrictSerializer); DRF's stock ObtainAuthToken view
    ignores unknown fields and hands out the token."""
    assert people.alice.token  # alice exists, the credentials are right
    response = people.anonymous.post(
        "/api/auth/token/", {"username": "alice", "password": kit.PASSWORD, "scope": "admin"}
    )
    error = kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert "scope" in error["extra"]["fields"]


@pytest.mark.parametrize(
    "write", [w for w in WRITES if w.body], ids=[w.name for w in WRITES if w.body]
)
def test_wrong_types_are_validation_errors(write: Write, people: kit.People) -> None:
    for wrong in ([], {"nested": True}, None):
        body = dict.fromkeys(write.body, wrong)
        response = send(people, write, json.dumps(body), "application/json")
        error = kit.assert_error(response, 400, kit.VALIDATION_ERROR)
        assert error["extra"], error


def test_json_types_are_not_coerced(people: kit.People) -> None:
    """A JSON string is not a number, a number is not a string and "true" is not ``true``: the input
    serializers refuse unknown fields (StrictSerializer) but DRF's fields still coerce types, so
    ``{"confirm": "true"}`` erases a user's memory and ``{"max_steps": "3"}`` is a budget. (The
    scenario files are strict for the same reason: runs/start/scenarios.py ``_Strict``.)"""
    waiting = kit.waiting_run(people.alice.user)
    handed = kit.handoff_run(people.alice.user)
    kit.assert_ok(people.reviewer.post(f"/api/handoffs/{handed.handoff_id}/claim/"))
    grant = {"capability": "search:public", "resource_scope": "public", "expires_at_step": "3"}
    cases = [
        (people.alice, "/api/runs/", {"goal": 12, "planner": PLANNER}),
        (people.alice, "/api/runs/", {"goal": "g", "planner": PLANNER,
                                      "budgets": {"max_steps": "3"}}),
        (people.alice, "/api/runs/", {"goal": "g", "planner": PLANNER,
                                      "budgets": {"max_tool_calls": 2.0}}),
        (people.operator, "/api/runs/", {"goal": "g", "planner": PLANNER, "grants": [grant]}),
        (people.alice, f"/api/runs/{waiting.run_id}/cancel/", {"reason": 404}),
        (people.reviewer, f"/api/handoffs/{handed.handoff_id}/resolve/",
         {"action": "fail", "reason": True}),
        (people.alice, "/api/preferences/changes/",
         {"key": "answer_language", "value": "en", "expected_version": "0"}),
        (people.alice, "/api/preferences/erase/", {"confirm": "true"}),
        (people.alice, "/api/preferences/erase/", {"confirm": 1}),
    ]  # fmt: skip
    results = []
    for persona, path, body in cases:
        results.append((f"{path} {json.dumps(body)}", persona.post(path, body)))
    bad = problems(results, 400, kit.VALIDATION_ERROR)
    assert not bad, "\n".join(bad)


def test_bodies_over_the_limit_are_413_request_too_large(people: kit.People) -> None:
    """DATA_UPLOAD_MAX_MEMORY_SIZE is 1 MiB; one byte more is refused before parsing."""
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 1024 * 1024
    filler = "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    results = []
    for write in WRITES:
        body = json.dumps({**write.body, "padding": filler})
        results.append((write.name, send(people, write, body, "application/json")))
    bad = problems(results, 413, kit.REQUEST_TOO_LARGE)
    assert not bad, "\n".join(bad)


def test_a_body_just_under_the_limit_is_parsed(people: kit.People) -> None:
    goal = "g" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - 100)
    body = json.dumps({"goal": goal, "planner": PLANNER})
    assert len(body.encode()) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = people.alice.post_raw("/api/runs/", body, "application/json")
    error = kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert "goal" in error["extra"]["fields"]


def test_deeply_nested_json_is_a_4xx(people: kit.People) -> None:
    """JSON nested deeper than Python's recursion limit (under 1 MiB) must not crash the
    parser or the JSON encoder of the database driver."""
    results = []
    for depth in (950, 5_000, 100_000):
        nested = "[" * depth + "]" * depth
        body = '{"goal": "g", "planner": {"kind": "fixture", "outputs": [' + nested + "]}}"
        people.alice.client.raise_request_exception = False
        response = people.alice.post_raw("/api/runs/", body, "application/json")
        results.append((f"depth {depth}", response))
    bad = [
        f"{label}: {kit.describe(r)[:160]}"
        for label, r in results
        if not (
            400 <= r.status_code < 500 and r.get("Content-Type", "").startswith("application/json")
        )
    ]
    assert not bad, "\n".join(bad)


def test_text_postgres_cannot_store_is_a_4xx(people: kit.People) -> None:
    """NUL characters and lone surrogates are valid JSON string escapes; PostgreSQL's jsonb
    refuses them. The planner outputs are stored as given, so they must be refused as input."""
    people.alice.client.raise_request_exception = False
    results = []
    for label, output in (
        ("nul in a string", '"a\\u0000b"'),
        ("nul in a key", '{"a\\u0000": 1}'),
        ("lone surrogate", '"\\ud800"'),
    ):
        body = '{"goal": "g", "planner": {"kind": "fixture", "outputs": [' + output + "]}}"
        results.append((label, people.alice.post_raw("/api/runs/", body, "application/json")))
    bad = [
        f"{label}: {kit.describe(r)[:160]}"
        for label, r in results
        if not (
            r.status_code in (201, 400) and r.get("Content-Type", "").startswith("application/json")
        )
    ]
    assert not bad, "\n".join(bad)


# --- ids and query parameters -------------------------------------------------------------------


def id_routes(t: Targets) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    """(label, persona, path template with {id}, body) for every route that takes an id."""
    return [
        ("run", "admin", "/api/runs/{id}/", None),
        ("run cancel", "admin", "/api/runs/{id}/cancel/", {"reason": "r"}),
        ("run events", "admin", "/api/runs/{id}/events/", None),
        ("run observations", "admin", "/api/runs/{id}/observations/", None),
        ("run ledger", "admin", "/api/runs/{id}/ledger/", None),
        ("run grants", "admin", "/api/runs/{id}/grants/", None),
        ("confirmation", "admin", "/api/confirmations/{id}/", None),
        ("approve", "admin", "/api/confirmations/{id}/approve/", {"proposal_hash": "0" * 64}),
        ("decline", "admin", "/api/confirmations/{id}/decline/", {"proposal_hash": "0" * 64}),
        ("revoke", "admin", "/api/preferences/{id}/revoke/", {"reason": "r"}),
    ]


def walk_ids(people: kit.People, ids: list[str]) -> list[tuple[str, Any]]:
    targets = Targets(people)
    kit.waiting_run(people.alice.user)  # something exists, so a lookup is a real lookup
    results = []
    for label, who, template, body in id_routes(targets):
        persona = getattr(people, who)
        persona.client.raise_request_exception = False
        for bad_id in ids:
            path = template.format(id=bad_id)
            response = persona.get(path) if body is None else persona.post(path, body)
            results.append((f"{label} {path[:60]}", response))
    return results


def test_unknown_ids_are_not_found(people: kit.People) -> None:
    ids = [
        "does-not-exist",
        "a" * 300,
        "%C3%A9t%C3%A9",
        "%F0%9F%92%A9",
        "%20",
        "run_" + "0" * 32,
        "%27%3B%20DROP%20TABLE%20runs_run%3B--",
    ]
    bad = problems(walk_ids(people, ids), 404, kit.NOT_FOUND)
    assert not bad, "\n".join(bad)


def test_ids_with_a_nul_character_are_not_found(people: kit.People) -> None:
    """``%00`` in a path id: SQLite compares it, PostgreSQL refuses NUL in text parameters."""
    bad = problems(walk_ids(people, ["%00", "run%00x"]), 404, kit.NOT_FOUND)
    assert not bad, "\n".join(bad)


def test_numeric_ids_out_of_range_are_not_found(people: kit.People) -> None:
    huge = "9" * 25
    results = []
    for persona, path, body in (
        (people.reviewer, f"/api/handoffs/{huge}/", None),
        (people.reviewer, f"/api/handoffs/{huge}/resolve/", {"action": "fail", "reason": "r"}),
        (people.reviewer, "/api/handoffs/0/", None),
        (people.alice, f"/api/preferences/changes/{huge}/apply/", {"proposal_hash": "0" * 64}),
        (people.alice, "/api/preferences/changes/0/apply/", {"proposal_hash": "0" * 64}),
    ):
        persona.client.raise_request_exception = False
        response = persona.get(path) if body is None else persona.post(path, body)
        results.append((path, response))
    bad = problems(results, 404, kit.NOT_FOUND)
    assert not bad, "\n".join(bad)


def test_paths_that_match_no_route_answer_json(people: kit.People) -> None:
    """A non-numeric handoff or change id does not match the ``<int:...>`` converter, so Django
    answers its HTML 404 page: the client gets no ``{code, message, extra}``."""
    results = []
    for persona, method, path in (
        (people.reviewer, "get", "/api/handoffs/abc/"),
        (people.reviewer, "post", "/api/handoffs/-1/claim/"),
        (people.reviewer, "post", "/api/handoffs/1.5/resolve/"),
        (people.alice, "post", "/api/preferences/changes/abc/apply/"),
        (people.alice, "get", "/api/no-such-route/"),
        (people.alice, "get", "/api/runs/..%2F..%2Fetc/"),  # decoded to a path with slashes
    ):
        response = getattr(persona, method)(path)
        results.append((f"{method.upper()} {path}", response))
    bad = problems(results, 404, kit.NOT_FOUND)
    assert not bad, "\n".join(bad)


def test_query_parameters_with_a_nul_character_are_a_4xx(people: kit.People) -> None:
    kit.waiting_run(people.alice.user)
    results = []
    for persona, path in (
        (people.operator, "/api/confirmations/?status=%00"),
        (people.reviewer, "/api/handoffs/?status=%00"),
        (people.admin, "/api/runs/?subject=%00"),
        (people.admin, "/api/preferences/?subject=%00"),
        (people.admin, "/api/preferences/history/?subject=%00"),
        (people.admin, "/api/preferences/export/?subject=%00"),
        (people.alice, "/api/preferences/history/?key=%00"),
    ):
        persona.client.raise_request_exception = False
        response = persona.get(path)
        ok = response.status_code == 200 or (
            400 <= response.status_code < 500
            and response.get("Content-Type", "").startswith("application/json")
        )
        if not ok:
            results.append(f"{path}: {kit.describe(response)[:160]}")
    assert not results, "\n".join(results)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", "/api/runs/"),
        ("delete", "/api/runs/"),
        ("patch", "/api/runs/{run}/"),
        ("delete", "/api/runs/{run}/"),
        ("get", "/api/runs/{run}/cancel/"),
        ("post", "/api/runs/{run}/events/"),
        ("post", "/api/confirmations/"),
        ("get", "/api/confirmations/{confirmation}/approve/"),
        ("put", "/api/handoffs/"),
        ("get", "/api/preferences/changes/"),
        ("delete", "/api/preferences/"),
        ("get", "/api/preferences/erase/"),
        ("get", "/api/auth/token/"),
    ],
)
def test_other_methods_are_405_json(method: str, path: str, people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    url = path.format(run=waiting.run_id, confirmation=waiting.confirmation_id)
    response = getattr(people.admin.client, method)(url, {}, format="json")
    kit.assert_error(response, 405, "METHOD_NOT_ALLOWED")
    assert m.Run.objects.get(pk=waiting.run_id).status == "waiting_confirmation"
