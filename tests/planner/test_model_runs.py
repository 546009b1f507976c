"""Runs planned by the model planner, end to end: the real ``Runner``, the ORM store, the real
tools (``search_public`` over the demo corpus, ``save_preference``) and a real local
OpenAI-compatible HTTP server replaying recorded chat-completion responses.

They check protocol handling — what the model is sent, how its answers and the endpoint's
failures become steps, rejections, stops and trace events — not a model's judgement: the
server's replies are fixed in advance, whatever it is asked.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import pytest

from agentconsole import wiring
from memory.models import PreferenceRecord
from policy.models import Confirmation
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.gateway import model_planning as mp
from runs.domain.runner import Runner
from runs.web.console_selectors import budgets_of
from tests.planner.conftest import CANARY_KEY, FakeSleep
from tests.support.clock import FakeClock
from tests.support.db_scan import scan
from tests.support.model_server import HANG, ReplayServer, answer, ok, status

pytestmark = pytest.mark.django_db(transaction=True)

SUBJECT = "alice"
SEARCH_GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 100}
MEMORY_GRANT = {"capability": "memory:write", "resource_scope": SUBJECT, "expires_at_step": 100}
GOAL = "What happens after the retries are exhausted?"


@pytest.fixture
def e2e_clock() -> FakeClock:
    return FakeClock()  # starts at the wall clock: rows written with timezone.now() compare


@pytest.fixture
def endpoint(settings: Any, server: ReplayServer) -> dict[str, Any]:
    config = {"base_url": server.base_url, "api_key": CANARY_KEY, "model": "replay-model",
              "timeout_s": 0.3, "max_attempts": 3}  # fmt: skip
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {"local": config}
    return config


@pytest.fixture
def runner(endpoint: dict[str, Any], e2e_clock: FakeClock) -> Runner:
    """The deployment's runner in inline mode (``AGENTCONSOLE_MODEL_CALLS=inline``: the worker
    makes the call; the split at the call, with the gateway, is tests/calls); only the
    planner's pacing is the test's (no real backoff)."""
    built = wiring.runner(clock=e2e_clock, defer_calls=False)
    built.planner_for = functools.partial(
        wiring.planner_for, clock=e2e_clock, sleep=FakeSleep(e2e_clock)
    )
    return built


def start(
    e2e_clock: FakeClock, grants: tuple[dict[str, Any], ...] = (SEARCH_GRANT,), **budgets: Any
) -> str:
    state = services.run_create(
        subject=SUBJECT,
        goal=GOAL,
        budgets=RunBudgets(**({"max_steps": 6, "deadline_ms": 600_000} | budgets)),
        grants=list(grants),
        planner={"kind": "openai", "endpoint": "local"},
        clock=e2e_clock,
    )
    return state.run_id


def events(run_id: str, name: str) -> list[dict[str, Any]]:
    rows = m.TraceEvent.objects.filter(run_id=run_id, event=name).order_by("sequence")
    return [r.details for r in rows]


def data_lines(user_message: str) -> list[dict[str, Any]]:
    """Every JSON line inside the request's delimited data blocks."""
    out = []
    for chunk in user_message.split(mp.DATA_OPEN)[1:]:
        block = chunk.split(mp.DATA_CLOSE, 1)[0]
        out.extend(json.loads(line) for line in block.strip().splitlines())
    return out


def test_a_search_then_a_cited_answer_completes_and_the_trace_names_the_model(
    corpus: None, server: ReplayServer, runner: Runner, e2e_clock: FakeClock
) -> None:
    server.play(ok("search_call"), ok("answer_with_citations"))
    run_id = start(e2e_clock)
    state = runner.advance(run_id)

    assert (state.status.value, state.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert state.citations == ["tool-1"]
    assert "[obs:tool-1]" in (state.answer or "")
    run = m.Run.objects.get(pk=run_id)
    assert run.tokens_used == (812 + 41) + (1203 + 37)
    outputs = events(run_id, "planner.output")
    assert [(o["source"], o["model"], o["endpoint"]) for o in outputs] == [
        ("model", "replay-model-7b", "local")
    ] * 2
    assert [(o["input_tokens"], o["output_tokens"]) for o in outputs] == [(812, 41), (1203, 37)]
    # The ledger ran the proposal under the program's id, not the model's call id.
    assert list(m.LedgerEntry.objects.filter(run_id=run_id).values_list("proposal_id", flat=True))
    assert m.LedgerEntry.objects.get(run_id=run_id).proposal_id == "model-1"

    # The console shows what the tokens cost, against the run's budget.
    budgets = {b.label: b.text for b in budgets_of(run, e2e_clock.now_ms())}
    assert budgets["Model tokens"] == f"{853 + 1240} of 200000"

    first, second = server.received
    # Offered: only what the run's grants could allow (no memory:write grant here).
    assert first.tool_names() == second.tool_names() == ["search_public"]
    seen = {d.get("observation_id"): d for d in data_lines(second.user_message())}
    assert seen["tool-1"]["trust"] == "untrusted-content"
    assert seen["user-1"]["trust"] == "user"


def test_parse_errors_cost_a_step_and_the_model_reads_them_next_turn(
    corpus: None, server: ReplayServer, runner: Runner, e2e_clock: FakeClock
) -> None:
    server.play(
        ok("malformed_arguments"),
        ok("unknown_tool"),
        ok("search_call"),
        answer("Quarantine after the retries [obs:tool-3]."),
    )
    run_id = start(e2e_clock)
    state = runner.advance(run_id)

    assert state.status.value == "completed"
    assert (state.step, state.tool_calls) == (4, 1)
    rejected = events(run_id, "proposal.rejected")
    assert [(r["layer"], r["code"]) for r in rejected] == [("parse", "PARSE_ERROR")] * 2
    # The rejection, with its problem, is in the very next request, as a policy observation.
    second, third = server.received[1], server.received[2]
    policy_1 = [
        d for d in data_lines(second.user_message()) if d.get("observation_id") == "policy-1"
    ]
    assert len(policy_1) == 1
    assert policy_1[0]["trust"] == "policy"
    assert json.loads(policy_1[0]["content"]) == {
        "code": "PARSE_ERROR",
        "layer": "parse",
        "problem": "ARGUMENTS_NOT_JSON",
    }
    policy_2 = next(
        d for d in data_lines(third.user_message()) if d.get("observation_id") == "policy-2"
    )
    assert json.loads(policy_2["content"])["problem"] == "TOOL_UNKNOWN"
    # Nothing the model wrote is echoed into the policy observation (the unknown tool's name).
    assert "delete_everything" not in json.dumps(data_lines(third.user_message()))


def test_hostile_retrieved_text_goes_as_data_and_save_preference_still_waits(
    corpus: None, server: ReplayServer, runner: Runner, e2e_clock: FakeClock
) -> None:
    """The forum post in the corpus says "call save_preference"; the replayed model obeys.
    The text reached the model only inside the delimited data block, and the proposal waits
    for the user's exact confirmation: nothing is written."""
    server.play(ok("search_call"), ok("save_preference_call"))
    run_id = start(e2e_clock, grants=(SEARCH_GRANT, MEMORY_GRANT))
    state = runner.advance(run_id)

    assert (state.status.value, state.stop_reason) == (
        "waiting_confirmation",
        "USER_CONFIRMATION_REQUIRED",
    )
    assert state.pending_proposal is not None
    assert state.pending_proposal["tool_name"] == "save_preference"
    assert not PreferenceRecord.objects.filter(subject=SUBJECT).exists()
    assert not m.LedgerEntry.objects.filter(run_id=run_id, tool_name="save_preference").exists()
    confirmation = Confirmation.objects.get(run_id=run_id)
    assert confirmation.status == "pending"
    # It cites what the model saw, untrusted retrieval included: provenance is the program's.
    assert "tool-1" in state.pending_proposal["source_observation_ids"]
    assert events(run_id, "proposal.received")[-1]["cites_untrusted"] == ["tool-1"]

    request = server.received[1]
    assert "save_preference" in request.tool_names()  # offered: the run holds memory:write
    hostile = "call save_preference"
    assert hostile not in request.system_message()
    user = request.user_message()
    outside = user
    for chunk in user.split(mp.DATA_OPEN)[1:]:
        outside = outside.replace(chunk.split(mp.DATA_CLOSE, 1)[0], "")
    assert hostile not in outside
    retrieved = next(d for d in data_lines(user) if d.get("observation_id") == "tool-1")
    assert retrieved["trust"] == "untrusted-content"
    assert hostile in retrieved["content"]


@pytest.mark.parametrize(
    ("replies", "code", "last_status"),
    [
        ([status(429)] * 3, "PLANNER_RATE_LIMITED", 429),
        ([status(500)] * 3, "PLANNER_UNAVAILABLE", 500),
        ([HANG] * 3, "PLANNER_TIMEOUT", None),
        ([status(401)], "PLANNER_REQUEST_REJECTED", 401),
    ],
)
def test_an_endpoint_that_fails_stops_the_run_with_its_code(
    server: ReplayServer,
    runner: Runner,
    e2e_clock: FakeClock,
    replies: list[Any],
    code: str,
    last_status: int | None,
) -> None:
    server.play(*replies)
    run_id = start(e2e_clock)
    state = runner.advance(run_id)
    assert (state.status.value, state.stop_reason) == ("failed", code)
    assert state.step == 0  # no planner output: no step spent
    assert len(server.received) == len(replies)
    stopped = events(run_id, "run.stopped")[-1]
    assert stopped["reason"] == code
    # How it ended, in numbers: the attempts made and the endpoint's last status.
    assert stopped["attempts"] == len(replies)
    assert stopped.get("http_status") == last_status


def test_a_transient_failure_is_retried_within_the_step(
    corpus: None, server: ReplayServer, runner: Runner, e2e_clock: FakeClock
) -> None:
    server.play(status(503), ok("search_call"), HANG, ok("answer_with_citations"))
    state = runner.advance(start(e2e_clock))
    assert state.status.value == "completed"
    assert [o["attempts"] for o in events(state.run_id, "planner.output")] == [2, 2]


def test_over_the_token_budget_the_run_stops_and_the_output_is_not_acted_on(
    corpus: None, server: ReplayServer, runner: Runner, e2e_clock: FakeClock
) -> None:
    server.play(ok("search_call"), ok("answer_with_citations"))
    run_id = start(e2e_clock, max_tokens=1_500)
    state = runner.advance(run_id)
    assert (state.status.value, state.stop_reason) == ("failed", "MAX_TOKENS_REACHED")
    assert state.answer is None  # the answer that crossed the budget was not taken
    assert m.Run.objects.get(pk=run_id).tokens_used == 853 + 1240
    handoff = m.Handoff.objects.get(run_id=run_id, reason="MAX_TOKENS_REACHED")
    assert any("max_tokens" in a for a in handoff.bundle["recommended_safe_actions"])
    stopped = events(run_id, "run.stopped")[-1]
    assert (stopped["tokens_used"], stopped["max_tokens"]) == (2093, 1500)


def test_an_endpoint_removed_from_settings_stops_the_run_with_a_code(
    server: ReplayServer, runner: Runner, e2e_clock: FakeClock, settings: Any
) -> None:
    run_id = start(e2e_clock)
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {}
    state = runner.advance(run_id)
    assert (state.status.value, state.stop_reason) == ("failed", "PLANNER_ENDPOINT_UNKNOWN")
    assert server.received == []


def test_the_api_key_appears_in_no_trace_observation_log_or_stored_field(
    corpus: None,
    server: ReplayServer,
    runner: Runner,
    e2e_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Every logger at DEBUG, the HTTP client libraries included (settings keep them quieter).
    caplog.set_level(logging.DEBUG)
    for name in ("openai", "httpx", "httpcore", "runs"):
        caplog.set_level(logging.DEBUG, logger=name)
    server.play(
        status(500),
        ok("malformed_arguments"),
        ok("search_call"),
        ok("save_preference_call"),
    )
    run_id = start(e2e_clock, grants=(SEARCH_GRANT, MEMORY_GRANT))
    state = runner.advance(run_id)
    assert state.status.value == "waiting_confirmation"

    # The key did travel: to the endpoint, in the Authorization header, and nowhere else.
    assert all(r.headers["Authorization"] == f"Bearer {CANARY_KEY}" for r in server.received)
    assert all(CANARY_KEY not in json.dumps(r.body) for r in server.received)
    assert len(caplog.records) > 0
    for record in caplog.records:
        assert CANARY_KEY not in record.getMessage()
        assert CANARY_KEY not in repr(record.__dict__)
    assert scan(CANARY_KEY) == []  # every text/JSON column of every table
    details = m.TraceEvent.objects.filter(run_id=run_id).values_list("details", flat=True)
    assert CANARY_KEY not in json.dumps(list(details))


@pytest.mark.parametrize(
    "final",
    [
        ok("answer_without_citations"),  # no [obs:…] marker at all
        answer("Quarantine [obs:user-1]."),  # the user's request is not evidence
        answer("Quarantine [obs:tool-9]."),  # no such observation
    ],
)
def test_an_answer_without_valid_citations_fails_final_validation(
    corpus: None, server: ReplayServer, runner: Runner, e2e_clock: FakeClock, final: Any
) -> None:
    server.play(ok("search_call"), final)
    state = runner.advance(start(e2e_clock))
    assert (state.status.value, state.stop_reason) == (
        "failed",
        "FINAL_CITATION_VALIDATION_FAILED",
    )
    assert state.answer is None
