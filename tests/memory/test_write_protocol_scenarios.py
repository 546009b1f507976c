"""The long-term memory write protocol (seed §9.1; issue 4 "Bad input"), one scenario file per
condition, each failing ALONE.

``mem-ok.json`` is the baseline: whitelisted key, valid value, a ``memory:write`` grant on the
run's own subject, a scenario confirmation approving exactly the proposal. It writes. Every other
``mem-*.json`` file differs from its baseline in one place only (proved structurally below) and
must then be refused with its own stable code in the trace, leave long-term memory unchanged and
leave no ``save_preference`` row in the ledger unless the tool legitimately ran.

The runs are made once for the module (``scenario_batch``: committed, long-term memory emptied
before each, captured just before and after each). ``test_write_protocol_alone.py`` shows each
failing condition to be the only obstacle: fixed, the same file writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.start.scenarios import parse_scenario
from tests.memory.memory_kit import Ran, differing_paths
from tests.support.runs import SCENARIO_DIR, load_scenario

# Every test may read the database (the batch's rows, rolled back); and pytest-django creates
# the test database only for runs that collect a django_db test.
pytestmark = pytest.mark.django_db

SEARCH_ONLY = [("p1", "search_public", "succeeded")]


@dataclass(frozen=True)
class Case:
    name: str
    base: str
    # Where the file may differ from its baseline (dotted JSON paths, prefixes).
    differs_at: tuple[str, ...]
    # "rejected": a proposal.rejected of p2 with (layer, code), then a completed run.
    # "waits": the run waits for a person; policy.confirmation.checked carries the code.
    outcome: str
    layer: str | None
    code: str


CASES = [
    *(
        Case(
            name,
            "mem-ok",
            ("planner.1.arguments.", "confirmations.0.proposal.arguments."),
            "rejected",
            "semantic",
            "MEMORY_KEY_NOT_ALLOWED",
        )
        for name in ("mem-key-not-allowed", "mem-key-system-instruction")
    ),
    Case(
        "mem-value-too-long",
        "mem-ok",
        ("planner.1.arguments.value", "confirmations.0.proposal.arguments.value"),
        "rejected",
        "semantic",
        "MEMORY_VALUE_TOO_LONG",
    ),
    Case(
        "mem-value-invalid",
        "mem-ok",
        ("planner.1.arguments.", "confirmations.0.proposal.arguments."),
        "rejected",
        "semantic",
        "MEMORY_VALUE_INVALID",
    ),
    Case(
        "mem-confirmation-other-value",
        "mem-ok",
        ("confirmations.0.proposal.arguments.value",),
        "waits",
        None,
        "CONFIRMATION_FOR_OTHER_PROPOSAL",
    ),
    Case(
        "mem-no-confirmation",
        "mem-ok",
        ("confirmations",),
        "waits",
        None,
        "USER_CONFIRMATION_REQUIRED",
    ),
    Case(
        "mem-confirmation-declined",
        "mem-ok",
        ("confirmations.0.approved",),
        "rejected",
        "confirmation",
        "CONFIRMATION_DECLINED",
    ),
    Case(
        "mem-confirmation-expired",
        "mem-ok",
        ("confirmations.0.expires_at_step",),
        "waits",
        None,
        "CONFIRMATION_EXPIRED",
    ),
    Case(
        "mem-grant-other-subject",
        "mem-ok",
        ("grants.1.resource_scope",),
        "rejected",
        "authorization",
        "CAPABILITY_SCOPE_MISMATCH",
    ),
    Case(
        "mem-no-grant", "mem-ok", ("grants.1.",), "rejected", "authorization", "MISSING_CAPABILITY"
    ),
    Case(
        "mem-grant-expired",
        "mem-ok",
        ("grants.1.expires_at_step",),
        "rejected",
        "authorization",
        "CAPABILITY_EXPIRED",
    ),
    Case(
        "mem-capability-in-output",
        "mem-ok",
        ("planner.1.capability",),
        "rejected",
        "parse",
        "PARSE_ERROR",
    ),
    Case(
        "mem-poisoned-retrieval",
        "mem-ok",
        ("goal", "confirmations", "planner.0.arguments.query", "planner.1."),
        "rejected",
        "semantic",
        "MEMORY_KEY_NOT_ALLOWED",
    ),
]
CASE_IDS = [c.name for c in CASES]


def _covered(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p.rstrip(".") or path.startswith(p) for p in prefixes)


# Runs that the tests below only look at: made once for the module (committed; memory emptied
# before each), so every check reads the run's output and long-term memory around that run.
BATCH = [
    *CASE_IDS,
    "mem-ok",
    "mem-human-approves",
    "mem-confirmation-replayed",
    "mem-ok-update",
    "mem-stale-version",
    "mem-stale-no-version",
    "mem-poisoned-whitelisted",
]


@pytest.fixture(scope="module")
def ran(scenario_batch) -> dict[str, Ran]:
    return scenario_batch(BATCH)


# -- the files themselves ----------------------------------------------------------------------


MEM_FILES = sorted(p.stem for p in SCENARIO_DIR.glob("mem-*.json"))


@pytest.mark.parametrize("name", MEM_FILES)
def test_every_mem_file_is_a_valid_scenario_with_a_name_and_a_description(name):
    text = (SCENARIO_DIR / f"{name}.json").read_bytes()
    scenario = parse_scenario(text)
    assert scenario.name == name
    assert len(scenario.description) > 40
    assert scenario.subject == "alice"


def test_every_case_has_its_file():
    named = {c.name for c in CASES} | {c.base for c in CASES}
    assert named <= set(MEM_FILES)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_each_violation_file_differs_from_its_baseline_in_one_condition_only(case):
    base, data = load_scenario(case.base), load_scenario(case.name)
    changed = differing_paths(base, data) - {"name", "description"}
    assert changed, f"{case.name} is identical to {case.base}"
    outside = sorted(p for p in changed if not _covered(p, case.differs_at))
    assert outside == [], f"{case.name} also differs from {case.base} at {outside}"


@pytest.mark.parametrize(
    ("name", "differs_at"),
    [
        # The same save proposed again (p3) before the final answer.
        ("mem-confirmation-replayed", ("planner.2.", "planner.3.", "budgets.max_tool_calls")),
        # The confirmation comes from a person at run time instead of from the file.
        ("mem-human-approves", ("confirmations", "human.")),
    ],
)
def test_the_other_variants_of_the_baseline_differ_only_where_they_say(name, differs_at):
    changed = differing_paths(load_scenario("mem-ok"), load_scenario(name)) - {
        "name",
        "description",
    }
    outside = sorted(p for p in changed if not _covered(p, differs_at))
    assert outside == []
    assert changed


def test_stale_version_files_differ_from_their_baseline_only_in_the_version_named():
    base = load_scenario("mem-ok-update")
    for name in ("mem-stale-version", "mem-stale-no-version"):
        changed = differing_paths(base, load_scenario(name)) - {"name", "description"}
        assert changed == {
            "planner.2.arguments.expected_version",
            "confirmations.1.proposal.arguments.expected_version",
        }, name
    # And the baseline of CAS is mem-ok plus one confirmed update naming the version it read.
    update = load_scenario("mem-ok-update")
    assert update["planner"][2]["arguments"] == {
        "key": "answer_language",
        "value": "en",
        "expected_version": 1,
    }


# -- the baseline ------------------------------------------------------------------------------


def test_baseline_writes_when_every_condition_holds(ran):
    run = ran["mem-ok"]
    result = run.result

    assert result.status == "completed", result.codes()
    assert result.rejections() == []
    assert result.ledger_rows() == [*SEARCH_ONLY, ("p2", "save_preference", "succeeded")]
    assert run.saves == ("p2",)
    (confirmed,) = result.events("policy.confirmation.checked", "p2")
    assert confirmed["details"]["result"] == "confirmed"
    assert confirmed["details"]["confirmation_id"] == f"{result.run_id}:confirm-save"
    (given,) = result.confirmations
    assert given["origin"] == "scenario"
    assert given["status"] == "consumed"

    assert run.before["records"] == []
    record = run.record("answer_language")
    assert (record["value"], record["version"], record["source_kind"]) == (
        "zh-CN",
        1,
        "user-confirmation",
    )
    assert record["confirmation_id"] == f"{result.run_id}:confirm-save"
    assert record["created_by_run"] == result.run_id
    assert record["revoked_at"] is None
    # A retention is always defined: the record expires (answer_language keeps 365 days).
    expected_expiry = timezone.now() + timedelta(days=365)
    assert abs(record["expires_at"] - expected_expiry) < timedelta(minutes=5)
    (history,) = run.after["history"]
    assert (history["action"], history["version"], history["value"]) == ("write", 1, "zh-CN")
    assert history["run_id"] == result.run_id
    (entry,) = [r for r in result.ledger if r["tool_name"] == "save_preference"]
    assert history["idempotency_token"] == entry["idempotency_token"]
    assert result.observation("tool-2")["content"]["value"] == {
        "key": "answer_language",
        "version": 1,
    }
    # The trace never carries the (redacted) value, only the key.
    (received,) = result.events("proposal.received", "p2")
    assert received["details"]["arg_key"] == "answer_language"
    assert "arg_value" not in received["details"]


def test_a_person_approving_at_run_time_is_a_valid_confirmation_too(ran):
    run = ran["mem-human-approves"]
    result = run.result

    assert result.status == "completed"
    (checked_first, checked_again) = result.events("policy.confirmation.checked", "p2")
    assert checked_first["details"] == {"result": "required", "code": "USER_CONFIRMATION_REQUIRED"}
    assert checked_again["details"]["result"] == "confirmed"
    (asked,) = result.confirmations
    assert (asked["origin"], asked["status"], asked["cites_untrusted"]) == (
        "runtime",
        "consumed",
        False,
    )
    assert run.history() == [("answer_language", 1, "write", "zh-CN")]
    assert run.saves == ("p2",)


# -- each condition failing alone --------------------------------------------------------------


def _assert_nothing_written(run: Ran) -> None:
    assert run.after == run.before
    assert run.result.preferences == []
    assert [r for r in run.result.ledger if r["tool_name"] == "save_preference"] == []
    assert run.saves == ()


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_each_condition_failing_alone_is_refused_with_its_code_and_nothing_is_written(ran, case):
    run = ran[case.name]
    result = run.result

    _assert_nothing_written(run)
    assert case.code in result.codes()
    scenario_confirmations = [c for c in result.confirmations if c["origin"] == "scenario"]
    if case.outcome == "rejected":
        assert result.status == "completed", result.codes()
        assert result.rejections() == [("p2", case.layer, case.code)]
        assert result.ledger_rows() == SEARCH_ONLY
        rejection = result.observation("policy-2")
        assert (rejection["trust"], rejection["citable"]) == ("policy", False)
        assert rejection["content"]["code"] == case.code
        capability = result.events("policy.capability.checked", "p2")
        confirmation = result.events("policy.confirmation.checked", "p2")
        if case.layer in ("parse", "semantic"):
            # Refused before authorization: no grant was looked at, no person asked.
            assert capability == []
            assert confirmation == []
            assert [c for c in result.confirmations if c["origin"] == "runtime"] == []
        if case.layer == "parse":
            assert result.events("proposal.received", "p2") == []
        if case.layer == "authorization":
            (denied,) = capability
            assert denied["details"] == {"result": "denied", "code": case.code}
            assert confirmation == []
        if case.layer == "confirmation":
            (granted,) = capability
            assert granted["details"]["result"] == "granted"
            (declined,) = confirmation
            assert declined["details"] == {"result": "declined", "code": case.code}
        # A scenario approval that was not used stays as it was: never consumed by a refusal.
        assert all(c["status"] in ("approved", "declined") for c in scenario_confirmations)
    else:
        assert result.status == "waiting_confirmation"
        assert result.state["stop_reason"] == "USER_CONFIRMATION_REQUIRED"
        assert result.rejections() == []
        assert result.ledger_rows() == SEARCH_ONLY
        (granted,) = result.events("policy.capability.checked", "p2")
        assert granted["details"]["result"] == "granted"
        (checked,) = result.events("policy.confirmation.checked", "p2")
        assert checked["details"] == {"result": "required", "code": case.code}
        (waiting,) = result.events("proposal.waiting-confirmation", "p2")
        (received,) = result.events("proposal.received", "p2")
        (asked,) = [c for c in result.confirmations if c["origin"] == "runtime"]
        assert asked["status"] == "pending"
        assert asked["proposal_hash"] == received["details"]["proposal_hash"]
        assert asked["id"] == waiting["details"]["confirmation_id"]
        assert result.state["pending_proposal"]["proposal_id"] == "p2"
        for c in scenario_confirmations:
            # Neither the approval of another value nor an expired one is used up.
            assert c["status"] == "approved"
            same_proposal = case.code == "CONFIRMATION_EXPIRED"
            assert (c["proposal_hash"] == asked["proposal_hash"]) is same_proposal


def test_a_replayed_confirmation_authorizes_nothing(ran):
    run = ran["mem-confirmation-replayed"]
    result = run.result

    assert result.status == "waiting_confirmation"
    # p2 ran once, legitimately; p3 (same save, new proposal id) found the approval consumed.
    assert result.ledger_rows() == [*SEARCH_ONLY, ("p2", "save_preference", "succeeded")]
    assert run.saves == ("p2",)
    (checked,) = result.events("policy.confirmation.checked", "p3")
    assert checked["details"] == {"result": "required", "code": "CONFIRMATION_ALREADY_USED"}
    (p2,) = result.events("proposal.received", "p2")
    (p3,) = result.events("proposal.received", "p3")
    assert p2["details"]["proposal_hash"] == p3["details"]["proposal_hash"]
    assert result.events("tool.started", "p3") == []
    assert run.history() == [("answer_language", 1, "write", "zh-CN")]
    assert run.record("answer_language")["version"] == 1
    statuses = {c["origin"]: c["status"] for c in result.confirmations}
    assert statuses == {"scenario": "consumed", "runtime": "pending"}


# -- compare-and-set through the tool --------------------------------------------------------


def test_an_update_naming_the_version_it_read_writes_the_next_version(ran):
    run = ran["mem-ok-update"]
    result = run.result

    assert result.status == "completed"
    assert result.ledger_rows() == [
        *SEARCH_ONLY,
        ("p2", "save_preference", "succeeded"),
        ("p3", "save_preference", "succeeded"),
    ]
    assert run.history() == [
        ("answer_language", 1, "write", "zh-CN"),
        ("answer_language", 2, "write", "en"),
    ]
    record = run.record("answer_language")
    assert (record["value"], record["version"]) == ("en", 2)
    assert record["confirmation_id"] == f"{result.run_id}:confirm-en"


@pytest.mark.parametrize("name", ["mem-stale-version", "mem-stale-no-version"])
def test_a_stale_version_is_a_conflict_with_current_and_proposed_values(ran, name):
    run = ran[name]
    result = run.result

    assert result.status == "completed"
    # The tool legitimately ran (every gate condition held); its outcome is the conflict.
    assert result.ledger_rows() == [
        *SEARCH_ONLY,
        ("p2", "save_preference", "succeeded"),
        ("p3", "save_preference", "rejected"),
    ]
    assert run.saves == ("p2", "p3")
    (completed,) = result.events("tool.completed", "p3")
    assert completed["details"]["status"] == "rejected"
    assert completed["details"]["code"] == "PREFERENCE_VERSION_CONFLICT"
    assert "PREFERENCE_VERSION_CONFLICT" in result.codes()
    observation = result.observation("tool-3")
    assert observation["citable"] is False
    content = observation["content"]
    assert (content["status"], content["code"]) == ("rejected", "PREFERENCE_VERSION_CONFLICT")
    details = content["details"]
    assert details["ok"] is False
    assert details["current_value"] == "zh-CN"
    assert details["proposed_value"] == "en"
    assert details["version"] == 1
    # Nothing written by p3: still v1, exactly one history row.
    record = run.record("answer_language")
    assert (record["value"], record["version"]) == ("zh-CN", 1)
    assert record["confirmation_id"] == f"{result.run_id}:confirm-zh"
    assert run.history() == [("answer_language", 1, "write", "zh-CN")]
    (ledger_p3,) = [r for r in result.ledger if r["proposal_id"] == "p3"]
    assert ledger_p3["outcome"]["code"] == "PREFERENCE_VERSION_CONFLICT"


# -- retrieved text never writes ---------------------------------------------------------------


def test_poisoned_retrieval_cannot_write_even_with_a_memory_grant(ran):
    run = ran["mem-poisoned-retrieval"]
    result = run.result

    assert result.rejections() == [("p2", "semantic", "MEMORY_KEY_NOT_ALLOWED")]
    tool_1 = result.observation("tool-1")
    assert tool_1["trust"] == "untrusted-content"
    passages = " ".join(r["passage"] for r in tool_1["content"]["value"]["results"])
    assert "save_preference" in passages
    (received,) = result.events("proposal.received", "p2")
    assert received["details"]["cites_untrusted"] == ["tool-1"]
    assert received["details"]["arg_key"] == "auto_approve"
    assert result.confirmations == []
    _assert_nothing_written(run)


def test_retrieved_text_steering_a_whitelisted_write_still_needs_the_person(ran):
    run = ran["mem-poisoned-whitelisted"]
    result = run.result

    assert result.status == "completed"
    (asked,) = result.confirmations
    # The person is told the proposal cites untrusted content; they decline it.
    assert (asked["origin"], asked["cites_untrusted"], asked["status"]) == (
        "runtime",
        True,
        "declined",
    )
    assert result.rejections() == [("p2", "confirmation", "CONFIRMATION_DECLINED")]
    assert result.ledger_rows() == SEARCH_ONLY
    _assert_nothing_written(run)
