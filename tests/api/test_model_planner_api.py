"""Choosing the model planner through the API (issue 12 item 1): a run's or a profile's planner
names a configured endpoint and optionally a model — never a URL or a key — and a run carries a
``max_tokens`` budget.

Personas: alice (a user who starts her own runs), operator (defines profiles)."""

from __future__ import annotations

from typing import Any

import pytest

from runs import models as m
from runs.start import profiles
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

MODEL = {"kind": "openai", "endpoint": "local"}


@pytest.fixture(autouse=True)
def endpoints(settings: Any) -> None:
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {
        "local": {"base_url": "http://127.0.0.1:9/v1", "api_key": "k", "model": "m"}
    }


def test_a_run_names_an_endpoint_and_gets_a_token_budget(people: kit.People) -> None:
    body = {"goal": "g", "planner": {**MODEL, "model": "qwen2.5-7b"},
            "budgets": {"max_tokens": 5_000}}  # fmt: skip
    run = kit.assert_ok(people.alice.post("/api/runs/", body), 201)
    assert (run["max_tokens"], run["tokens_used"]) == (5_000, 0)
    row = m.Run.objects.get(pk=run["run_id"])
    assert row.planner == {"kind": "openai", "endpoint": "local", "model": "qwen2.5-7b"}
    created = m.TraceEvent.objects.get(run_id=row.pk, event="run.created")
    assert created.details["planner"] == "openai"


@pytest.mark.parametrize(
    ("planner", "status", "code"),
    [
        ({"kind": "openai", "endpoint": "elsewhere"}, 400, "PLANNER_ENDPOINT_UNKNOWN"),
        ({"kind": "openai"}, 400, "PLANNER_CONFIG_INVALID"),
        ({**MODEL, "outputs": []}, 400, "PLANNER_CONFIG_INVALID"),
        # A URL or a key in a run record could send the deployment's key elsewhere.
        ({**MODEL, "base_url": "http://attacker.example/v1"}, 400, kit.VALIDATION_ERROR),
        ({**MODEL, "api_key": "sk-mine"}, 400, kit.VALIDATION_ERROR),
        ({"kind": "fixture", "outputs": [], "endpoint": "local"}, 400, kit.VALIDATION_ERROR),
    ],
)
def test_a_bad_model_planner_is_refused_and_nothing_is_written(
    people: kit.People, planner: dict[str, Any], status: int, code: str
) -> None:
    kit.assert_error(
        people.alice.post("/api/runs/", {"goal": "g", "planner": planner}), status, code
    )
    assert not m.Run.objects.exists()


@pytest.mark.parametrize("max_tokens", [0, -1, "100", 100_000_001, True])
def test_a_bad_token_budget_is_refused(people: kit.People, max_tokens: Any) -> None:
    body = {"goal": "g", "planner": MODEL, "budgets": {"max_tokens": max_tokens}}
    error = kit.assert_error(people.alice.post("/api/runs/", body), 400, kit.VALIDATION_ERROR)
    assert "budgets" in error["extra"]["fields"]


def test_a_profile_may_choose_the_model_planner(people: kit.People) -> None:
    data = {
        "name": "model-research",
        "planner": {**MODEL, "model": "llama3.1"},
        "tools": ["search_public"],
        "grant_templates": [
            {"capability": "search:public", "resource_scope": "public", "expires_at_step": 5}
        ],
        "budgets": {"max_steps": 4, "max_tool_calls": 2, "deadline_s": 60, "max_tokens": 8_000},
    }
    profiles.profile_create(data=data, by=people.operator.user)
    run = kit.assert_ok(
        people.alice.post("/api/runs/", {"goal": "g", "profile": "model-research"}), 201
    )
    assert run["max_tokens"] == 8_000
    assert m.Run.objects.get(pk=run["run_id"]).planner == {**MODEL, "model": "llama3.1"}


def test_a_profile_naming_an_unconfigured_endpoint_is_refused(people: kit.People) -> None:
    data = {"name": "nowhere", "planner": {"kind": "openai", "endpoint": "elsewhere"},
            "tools": ["search_public"]}  # fmt: skip
    with pytest.raises(profiles.ProfileInvalid) as exc:
        profiles.profile_create(data=data, by=people.operator.user)
    assert exc.value.code == "PROFILE_PLANNER_INVALID"
    assert exc.value.extra["cause"] == "PLANNER_ENDPOINT_UNKNOWN"
