"""Shared pieces of the HTTP API tests: personas, the error-shape check, and builders that put
runs, confirmations, handoffs and preferences into known states in-process (through the services
and ``runs.start.scenarios.run_scenario``, never a Celery worker)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from memory import services as memory_services
from memory.models import PreferenceChange
from policy.models import Confirmation
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets

# Runs that end with a handoff live in tests/support/handoffs.py (the console tests use them too).
from tests.support.handoffs import Handed as Handed
from tests.support.handoffs import handoff_run as handoff_run

# The personas live in tests/support/personas.py; the API tests know them as kit.<name>.
from tests.support.personas import PASSWORD as PASSWORD
from tests.support.personas import People as People
from tests.support.personas import Persona as Persona
from tests.support.personas import anonymous as anonymous
from tests.support.personas import ensure_roles as ensure_roles
from tests.support.personas import make_persona as make_persona
from tests.support.personas import persona as persona

# Fixture files and in-process scenario runs live in tests/support/runs.py.
from tests.support.runs import load_fixture as load_fixture
from tests.support.runs import scenario_run as scenario_run

HASH_OTHER = "0" * 64  # a well-formed proposal hash that no proposal has

# The codes a client may rely on (agentconsole/kernel/http.py, runs/services.py,
# runs/people/handoffs.py, memory/services.py). The message is for humans and may change; the code
# may not.
NOT_AUTHENTICATED = "NOT_AUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"
NOT_FOUND = "NOT_FOUND"
VALIDATION_ERROR = "VALIDATION_ERROR"
MALFORMED_REQUEST = "MALFORMED_REQUEST"
REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
CONFIRMATION_HASH_MISMATCH = "CONFIRMATION_HASH_MISMATCH"
CONFIRMATION_NOT_PENDING = "CONFIRMATION_NOT_PENDING"
HANDOFF_NOT_OPEN = "HANDOFF_NOT_OPEN"
MEMORY_SCOPE_NOT_OWNED = "MEMORY_SCOPE_NOT_OWNED"
PREFERENCE_VERSION_CONFLICT = "PREFERENCE_VERSION_CONFLICT"
PROFILE_NOT_FOUND = "PROFILE_NOT_FOUND"
PROFILE_EXCLUSIVE = "PROFILE_EXCLUSIVE"


# --- responses --------------------------------------------------------------------------------


def body_of(response: Any) -> Any:
    return json.loads(response.content.decode("utf-8"))


def describe(response: Any) -> str:
    text = " ".join(response.content[:600].decode("utf-8", "replace").split())
    return f"{response.status_code} {response.get('Content-Type')} {text}"


def assert_error(response: Any, status: int | tuple[int, ...], code: str | None) -> dict[str, Any]:
    """A 4xx is JSON ``{"code", "message", "extra"}`` and nothing else, with a stable code."""
    statuses = (status,) if isinstance(status, int) else status
    assert response.status_code in statuses, describe(response)
    assert response.get("Content-Type", "").startswith("application/json"), describe(response)
    body = body_of(response)
    assert isinstance(body, dict), describe(response)
    assert set(body) == {"code", "message", "extra"}, describe(response)
    assert isinstance(body["code"], str), describe(response)
    assert body["code"] == body["code"].upper(), describe(response)
    assert isinstance(body["message"], str), describe(response)
    assert body["message"], describe(response)
    assert isinstance(body["extra"], dict), describe(response)
    if code is not None:
        assert body["code"] == code, describe(response)
    return body


def assert_ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, describe(response)
    return body_of(response)


# --- builders ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Waiting:
    """A run stopped at ``waiting_confirmation`` with one pending confirmation."""

    run_id: str
    confirmation_id: str
    proposal_hash: str
    version: int


def waiting_run(owner: Any, *, cites: list[str] | None = None) -> Waiting:
    """``s15-missing-confirmation`` for ``owner`` (subject and grant scope = their username):
    save_preference(answer_language=zh-CN) waits for a person, nothing ran."""
    data = copy.deepcopy(load_fixture("scenarios/s15-missing-confirmation.json"))
    subject = owner.get_username()
    data["subject"] = subject
    data["grants"][0]["resource_scope"] = subject
    if cites is not None:
        data["planner"][0]["source_observation_ids"] = cites
    export = scenario_run(data, owner)
    assert export["state"]["status"] == "waiting_confirmation", export["state"]
    (pending,) = [c for c in export["confirmations"] if c["status"] == "pending"]
    return Waiting(
        run_id=export["state"]["run_id"],
        confirmation_id=pending["id"],
        proposal_hash=pending["proposal_hash"],
        version=export["state"]["version"],
    )


def created_run(owner: Any, *, subject: str | None = None, goal: str = "a goal") -> str:
    """A run as POST /api/runs/ leaves it before a worker picks it up: ``created``."""
    state = services.run_create(
        subject=subject or owner.get_username(),
        goal=goal,
        budgets=RunBudgets(),
        grants=[],
        planner={"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]},
        owner=owner,
    )
    return state.run_id


def preference_set(owner: Any, key: str = "answer_language", value: str = "zh-CN") -> int:
    """Write a preference through the owner's own propose/apply path; its new version."""
    current = memory_services.preferences_list(subject=owner.get_username(), by=owner)
    version = next((r.version for r in current if r.key == key and r.revoked_at is None), None)
    change = memory_services.preference_propose_edit(
        subject=owner.get_username(), key=key, value=value, expected_version=version, by=owner
    )
    result = memory_services.preference_apply_edit(
        change_id=change.pk, shown_hash=change.proposal_hash, by=owner
    )
    assert result.ok, result
    return result.version


def pending_change(owner: Any, key: str = "answer_language", value: str = "en") -> PreferenceChange:
    current = memory_services.preferences_list(subject=owner.get_username(), by=owner)
    version = next((r.version for r in current if r.key == key and r.revoked_at is None), None)
    return memory_services.preference_propose_edit(
        subject=owner.get_username(), key=key, value=value, expected_version=version, by=owner
    )


def confirmation_row(confirmation_id: str) -> Confirmation:
    return Confirmation.objects.select_related("decided_by").get(pk=confirmation_id)


def events_of(run_id: str, name: str | None = None) -> list[m.TraceEvent]:
    rows = m.TraceEvent.objects.filter(run_id=run_id).order_by("sequence")
    return [e for e in rows if name is None or e.event == name]


def profile_define(by: Any, name: str, **changes: Any) -> Any:
    """A run profile like the demo's read-only ``research`` (runs.demo.demo_profiles), renamed and
    changed, through the real service."""
    from runs.demo.demo_profiles import DEMO_PROFILES
    from runs.start import profiles

    data = {**copy.deepcopy(DEMO_PROFILES[0]), "name": name, **changes}
    return profiles.profile_create(data=data, by=by)
