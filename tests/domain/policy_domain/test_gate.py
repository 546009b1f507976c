"""The policy gate, layer by layer: each failing layer has its code, and no tool is called."""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.domain.canonical import (
    arguments_hash,
    idempotency_token,
    per_run_confirmation_hash,
    proposal_hash,
)
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.contracts import CallFacts, ConfirmationMode, PathResource, ResourceError
from policy.domain.decisions import (
    ExecutableCommand,
    Execute,
    NeedsConfirmation,
    Reject,
    Stop,
)
from policy.domain.errors import ParseError
from policy.domain.gate import RunView, evaluate
from policy.domain.grants import Constraint
from policy.domain.proposals import ActionProposal, parse_planner_output
from policy.domain.registry import ToolRegistry
from tests.domain.toolkit import RUN_ID, SUBJECT, Toolkit, grant, tool
from tests.domain.toolkit import run_view as toolkit_run_view

NOW = 1_000_000
DEADLINE = NOW + 60_000


@pytest.fixture
def kit() -> Toolkit:
    return Toolkit()


@pytest.fixture
def registry(kit: Toolkit) -> ToolRegistry:
    return ToolRegistry(
        [
            kit.search_contract(),
            kit.kv_contract(),
            kit.artifact_contract(),
            kit.preference_contract(),
            kit.status_contract(),
        ]
    )


def run_view(**changes: Any) -> RunView:
    return toolkit_run_view(DEADLINE, **changes)


def proposal(name: str, arguments: Any, *, version: str = "1", pid: str = "p1") -> ActionProposal:
    output = parse_planner_output(tool(pid, name, arguments, version=version))
    assert isinstance(output, ActionProposal)
    return output


def decide(
    registry: ToolRegistry,
    prop: ActionProposal,
    *,
    grants: Any = None,
    confirmations: Any = (),
    run: RunView | None = None,
    now: int = NOW,
):
    if grants is None:
        grants = [
            grant(c)
            for c in ("search:public", "kv:write", "artifact:write", "memory:write", "jobs:read")
        ]
    return evaluate(
        prop,
        run=run or run_view(),
        grants=grants,
        confirmations=confirmations,
        registry=registry,
        now_ms=now,
    )


def assert_reject(decision: Any, layer: str, code: str) -> None:
    assert isinstance(decision, Reject), decision
    assert (decision.layer, decision.code) == (layer, code)


def confirmation(
    p_hash: str,
    status: ConfirmationStatus = ConfirmationStatus.APPROVED,
    *,
    cid: str = "c1",
    run_id: str = RUN_ID,
    expires_at_step: int = 10,
) -> Confirmation:
    return Confirmation(
        confirmation_id=cid,
        run_id=run_id,
        proposal_hash=p_hash,
        status=status,
        expires_at_step=expires_at_step,
    )


PREF_ARGS = {"key": "answer_language", "value": "zh"}
PREF_HASH = proposal_hash("save_preference", "1", PREF_ARGS)


# ---- a valid proposal executes -----------------------------------------------------------------


def test_valid_search_executes_with_command(registry):
    decision = decide(registry, proposal("search_public", {"query": "retry"}))
    assert isinstance(decision, Execute)
    cmd = decision.command
    assert cmd.tool_name == "search_public"
    # The corpus the grant's scope was checked on is the corpus the tool is told to search.
    assert cmd.validated_arguments == {"query": "retry", "corpus": "public"}
    assert cmd.resource == "public"
    assert cmd.granted_capabilities == ("search:public",)
    assert cmd.grant_ids == ("g-search:public-run-1",)
    assert cmd.confirmation_id is None
    assert cmd.consume_confirmation is False
    args_hash = arguments_hash({"query": "retry", "corpus": "public"})
    assert cmd.arguments_hash == args_hash
    assert cmd.proposal_hash == proposal_hash("search_public", "1", {"query": "retry"})
    assert cmd.idempotency_token == idempotency_token(RUN_ID, "p1", "1", args_hash)
    assert decision.passed == (
        "parse",
        "registry",
        "schema",
        "semantic",
        "authorization",
        "confirmation",
        "state",
        "budget",
    )


# ---- parse -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        ["not", "an", "object"],
        "tool",
        None,
        {"kind": "shell", "proposal_id": "p1"},
        {"proposal_id": "p1", "tool_name": "kv_put", "tool_version": "1", "arguments": {}},
        {**tool("p1", "kv_put", {"key": "a", "value": "b"}), "capability": "memory:write"},
        {**tool("p1", "kv_put", {"key": "a", "value": "b"}), "grants": ["kv:write"]},
        {**tool("p1", "kv_put", {"key": "a", "value": "b"}), "proposal_id": "bad id!"},
        {**tool("p1", "kv_put", {"key": "a", "value": "b"}), "tool_version": 1},
        {"kind": "final", "answer": "x", "citation_observation_ids": ["tool-1"], "x": 1},
    ],
)
def test_parse_error(raw):
    with pytest.raises(ParseError) as exc:
        parse_planner_output(raw)
    assert exc.value.code == "PARSE_ERROR"


def test_capability_inside_proposal_has_no_effect(registry):
    # Without the extra field the same proposal is valid but unauthorized: the self-declared
    # capability can neither pass parsing nor grant anything.
    raw = tool("p1", "save_preference", PREF_ARGS)
    with pytest.raises(ParseError):
        parse_planner_output({**raw, "capability": "memory:write"})
    decision = decide(registry, parse_planner_output(raw), grants=[])
    assert_reject(decision, "authorization", "MISSING_CAPABILITY")


def test_arguments_too_large_at_parse():
    raw = tool("p1", "kv_put", {"key": "a", "value": "x" * (70 * 1024)})
    with pytest.raises(ParseError) as exc:
        parse_planner_output(raw)
    assert exc.value.code == "ARGUMENTS_TOO_LARGE"


def test_nan_in_arguments_is_a_parse_error():
    with pytest.raises(ParseError) as exc:
        parse_planner_output(tool("p1", "kv_put", {"key": "a", "value": float("nan")}))
    assert exc.value.code == "PARSE_ERROR"


# ---- registry ----------------------------------------------------------------------------------


def test_unknown_tool_name(registry):
    decision = decide(registry, proposal("rm_rf", {"path": "/"}))
    assert_reject(decision, "registry", "UNKNOWN_TOOL_OR_VERSION")
    assert decision.passed == ("parse",)


def test_known_tool_wrong_version(registry):
    decision = decide(registry, proposal("search_public", {"query": "x"}, version="2"))
    assert_reject(decision, "registry", "UNKNOWN_TOOL_OR_VERSION")


# ---- schema ------------------------------------------------------------------------------------


@pytest.mark.parametrize("arguments", [["retry"], "retry", 3, None])
def test_input_not_object(registry, arguments):
    assert_reject(
        decide(registry, proposal("search_public", arguments)), "schema", "INPUT_NOT_OBJECT"
    )


def test_unknown_input_field(registry):
    decision = decide(registry, proposal("search_public", {"query": "x", "capability": "all"}))
    assert_reject(decision, "schema", "UNKNOWN_INPUT_FIELD")
    assert "x" not in decision.message.replace("'$'", "")  # never echoes the value


def test_missing_input_field(registry):
    assert_reject(
        decide(registry, proposal("search_public", {"limit": 2})), "schema", "MISSING_INPUT_FIELD"
    )


def test_input_too_long(registry):
    decision = decide(registry, proposal("search_public", {"query": "q" * 201}))
    assert_reject(decision, "schema", "INPUT_TOO_LONG")
    assert "qqq" not in decision.message


def test_invalid_input_type_bool_is_not_integer(registry):
    decision = decide(registry, proposal("search_public", {"query": "x", "limit": True}))
    assert_reject(decision, "schema", "INVALID_INPUT_TYPE")


def test_arguments_over_contract_byte_limit(kit):
    contract = dataclasses.replace(kit.kv_contract(), max_input_bytes=32)
    decision = decide(ToolRegistry([contract]), proposal("kv_put", {"key": "k", "value": "v" * 40}))
    assert_reject(decision, "schema", "ARGUMENTS_TOO_LARGE")


# ---- semantic ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "run-output/../x",
        "/etc/passwd",
        "run-output\\..\\x",
        "run-output",
        "run-output/",
        "run-output/a/../..",
        "run-output/a/../../etc/passwd",
        "run-outputx/a",
        "./x",
        "/run-output/x",
        "run-output/a\x00b",
    ],
)
def test_path_outside_root(registry, path):
    decision = decide(registry, proposal("write_artifact", {"path": path, "body": "b"}))
    assert_reject(decision, "semantic", "PATH_OUTSIDE_ROOT")


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("run-output/a.txt", "run-output/a.txt"),
        ("run-output/./a/../b.txt", "run-output/b.txt"),
        ("run-output//x/y", "run-output/x/y"),
    ],
)
def test_path_inside_root_is_normalized(registry, path, resource):
    decision = decide(registry, proposal("write_artifact", {"path": path, "body": "b"}))
    assert isinstance(decision, Execute)
    assert decision.command.resource == resource


def test_empty_path_is_invalid(registry):
    decision = decide(registry, proposal("write_artifact", {"path": "", "body": "b"}))
    # minLength 1 stops it at the schema layer before the resource rule sees it.
    assert_reject(decision, "schema", "INPUT_TOO_SHORT")


def test_semantic_check_refuses_memory_key(registry):
    decision = decide(registry, proposal("save_preference", {"key": "auto_approve", "value": "1"}))
    assert_reject(decision, "semantic", "MEMORY_KEY_NOT_ALLOWED")


# ---- authorization -----------------------------------------------------------------------------


def test_missing_capability(registry):
    decision = decide(
        registry, proposal("search_public", {"query": "x"}), grants=[grant("kv:write")]
    )
    assert_reject(decision, "authorization", "MISSING_CAPABILITY")
    assert decision.passed == ("parse", "registry", "schema", "semantic")


def test_grant_of_another_run_is_ignored(registry):
    other = grant("search:public", run_id="run-2")
    decision = decide(registry, proposal("search_public", {"query": "x"}), grants=[other])
    assert_reject(decision, "authorization", "MISSING_CAPABILITY")


def test_capability_expired(registry):
    g = grant("search:public", expires_at_step=1)
    decision = decide(
        registry, proposal("search_public", {"query": "x"}), grants=[g], run=run_view(step=2)
    )
    assert_reject(decision, "authorization", "CAPABILITY_EXPIRED")
    # expires_at_step is inclusive
    assert isinstance(
        decide(
            registry, proposal("search_public", {"query": "x"}), grants=[g], run=run_view(step=1)
        ),
        Execute,
    )


@pytest.mark.parametrize(
    ("scope", "path"),
    [
        ("run-output/a", "run-output/b/x.txt"),
        ("run-output/a", "run-output/ab/x.txt"),
        ("run-output/a/b", "run-output/a/x.txt"),
    ],
)
def test_capability_scope_mismatch_path(registry, scope, path):
    decision = decide(
        registry,
        proposal("write_artifact", {"path": path, "body": "b"}),
        grants=[grant("artifact:write", scope)],
    )
    assert_reject(decision, "authorization", "CAPABILITY_SCOPE_MISMATCH")


def test_capability_scope_covers_subpath(registry):
    decision = decide(
        registry,
        proposal("write_artifact", {"path": "run-output/a/x.txt", "body": "b"}),
        grants=[grant("artifact:write", "run-output/a/")],
    )
    assert isinstance(decision, Execute)


def test_capability_scope_mismatch_subject_and_corpus(registry):
    confirmed = [confirmation(PREF_HASH)]
    decision = decide(
        registry,
        proposal("save_preference", PREF_ARGS),
        grants=[grant("memory:write", "bob")],
        confirmations=confirmed,
    )
    assert_reject(decision, "authorization", "CAPABILITY_SCOPE_MISMATCH")
    decision = decide(
        registry,
        proposal("search_public", {"query": "x"}),
        grants=[grant("search:public", "internal")],
    )
    assert_reject(decision, "authorization", "CAPABILITY_SCOPE_MISMATCH")


def test_capability_calls_exhausted(registry):
    g = grant("search:public", max_calls=2, calls_used=2)
    decision = decide(registry, proposal("search_public", {"query": "x"}), grants=[g])
    assert_reject(decision, "authorization", "CAPABILITY_CALLS_EXHAUSTED")
    g = grant("search:public", max_calls=2, calls_used=1)
    assert isinstance(
        decide(registry, proposal("search_public", {"query": "x"}), grants=[g]), Execute
    )


def test_one_fitting_grant_among_failing_ones_is_used(registry):
    grants = [
        grant("search:public", grant_id="old", expires_at_step=0),
        grant("search:public", grant_id="good"),
    ]
    decision = decide(registry, proposal("search_public", {"query": "x"}), grants=grants)
    assert isinstance(decision, Execute)
    assert decision.command.grant_ids == ("good",)


CONSTRAINT_CASES = [
    # (constraint, allowed values, refused values)
    (Constraint(equals="ok"), ["ok"], ["OK", "ok ", 1, True]),
    # 1 and 1.0 are one JSON number (RFC 8785, JSON Schema); true is never 1, at any depth.
    (Constraint(equals=1), [1, 1.0], [True, 1.5, "1", 2, [1]]),
    (Constraint(equals=True), [True], [1, "true", False, 1.0]),
    (Constraint(one_of=["zh", "en", 3]), ["zh", "en", 3, 3.0], ["fr", True, "3"]),
    (Constraint(one_of=[1]), [1], [True]),
    (Constraint(equals={"admin": 1}), [{"admin": 1}, {"admin": 1.0}], [{"admin": True}]),
    (
        Constraint(equals=[1, {"a": False}]),
        [[1.0, {"a": False}]],
        [[True, {"a": False}], [1, {"a": 0}], [{"a": False}, 1]],
    ),
    (Constraint(one_of=[[1], {"x": None}]), [[1], {"x": None}], [[True], {"x": False}, {}]),
    (Constraint(prefix="user/"), ["user/", "user/x"], ["use", "x/user/", 5, True]),
    (Constraint(maximum=10), [10, 0, -5, 9.5], [10.5, 11, True, "5", False]),
    (Constraint(maximum=1), [1, 0.5], [True, False]),
]


@pytest.mark.parametrize(("constraint", "allowed", "refused"), CONSTRAINT_CASES)
def test_constraint_allows_and_refuses(registry, constraint, allowed, refused):
    g = grant("kv:write", constraints={"value": constraint})
    for value in allowed:
        decision = decide(registry, proposal("kv_put", {"key": "k", "value": value}), grants=[g])
        assert isinstance(decision, Execute), (constraint, value, decision)
    for value in refused:
        decision = decide(registry, proposal("kv_put", {"key": "k", "value": value}), grants=[g])
        assert_reject(decision, "authorization", "CAPABILITY_CONSTRAINT_VIOLATED")


def test_constraint_on_absent_argument_refuses(registry):
    g = grant("search:public", constraints={"limit": Constraint(maximum=3)})
    decision = decide(registry, proposal("search_public", {"query": "x"}), grants=[g])
    assert_reject(decision, "authorization", "CAPABILITY_CONSTRAINT_VIOLATED")


def test_constraint_needs_exactly_one_kind():
    with pytest.raises(ValueError, match="exactly one"):
        Constraint()
    with pytest.raises(ValueError, match="exactly one"):
        Constraint(equals=1, maximum=2)


# ---- confirmation ------------------------------------------------------------------------------

PREF_GRANTS = [grant("memory:write", "alice")]


def decide_pref(registry, confirmations, *, args=PREF_ARGS, run=None):
    return decide(
        registry,
        proposal("save_preference", args),
        grants=PREF_GRANTS,
        confirmations=confirmations,
        run=run,
    )


def test_needs_confirmation_when_none(registry):
    decision = decide_pref(registry, [])
    assert isinstance(decision, NeedsConfirmation)
    assert decision.proposal_hash == PREF_HASH
    assert decision.confirmation_hash == PREF_HASH
    assert decision.existing_confirmation_id is None


def test_confirmation_for_other_arguments_does_not_count(registry):
    other = proposal_hash("save_preference", "1", {"key": "answer_language", "value": "en"})
    decision = decide_pref(registry, [confirmation(other)])
    assert isinstance(decision, NeedsConfirmation)
    assert decision.confirmation_hash == PREF_HASH


def test_confirmation_of_another_run_does_not_count(registry):
    decision = decide_pref(registry, [confirmation(PREF_HASH, run_id="run-2")])
    assert isinstance(decision, NeedsConfirmation)


def test_expired_confirmation_does_not_count(registry):
    decision = decide_pref(
        registry, [confirmation(PREF_HASH, expires_at_step=1)], run=run_view(step=2)
    )
    assert isinstance(decision, NeedsConfirmation)
    decision = decide_pref(registry, [confirmation(PREF_HASH, ConfirmationStatus.EXPIRED)])
    assert isinstance(decision, NeedsConfirmation)


def test_consumed_confirmation_does_not_count(registry):
    decision = decide_pref(registry, [confirmation(PREF_HASH, ConfirmationStatus.CONSUMED)])
    assert isinstance(decision, NeedsConfirmation)
    assert decision.existing_confirmation_id is None


def test_pending_confirmation_is_reused_not_duplicated(registry):
    decision = decide_pref(registry, [confirmation(PREF_HASH, ConfirmationStatus.PENDING)])
    assert isinstance(decision, NeedsConfirmation)
    assert decision.existing_confirmation_id == "c1"


def test_confirmation_declined(registry):
    decision = decide_pref(registry, [confirmation(PREF_HASH, ConfirmationStatus.DECLINED)])
    assert_reject(decision, "confirmation", "CONFIRMATION_DECLINED")


def test_approved_per_call_confirmation_executes_and_is_consumed(registry):
    decision = decide_pref(registry, [confirmation(PREF_HASH, cid="c7")])
    assert isinstance(decision, Execute)
    assert decision.command.confirmation_id == "c7"
    assert decision.command.consume_confirmation is True
    assert decision.command.resource == "alice"


def test_confirmation_stored_under_c1_is_checked_in_c1_never_across_schemes(kit, registry):
    """issue 9 item 3: a row approved before c2 (hash_scheme "c1") still authorizes its own
    proposal, compared with the proposal's c1 hash; a c1 hash labelled c2 matches nothing."""
    contract = kit.kv_contract(confirmation=ConfirmationMode.PER_CALL)
    reg = ToolRegistry([contract])
    prop = proposal("kv_put", {"key": "a", "value": 1.0})
    c1_hash = proposal_hash("kv_put", "1", {"key": "a", "value": 1.0}, "c1")
    assert c1_hash != prop.hash()  # 1.0 is spelled differently in c1
    old_row = confirmation(c1_hash).model_copy(update={"hash_scheme": "c1"})
    decision = decide(reg, prop, confirmations=[old_row])
    assert isinstance(decision, Execute), decision
    mislabelled = confirmation(c1_hash)  # says c2, holds a c1 hash
    assert isinstance(decide(reg, prop, confirmations=[mislabelled]), NeedsConfirmation)
    unknown = confirmation(c1_hash).model_copy(update={"hash_scheme": "c9"})
    assert isinstance(decide(reg, prop, confirmations=[unknown]), NeedsConfirmation)
    per_run = kit.kv_contract(confirmation=ConfirmationMode.PER_RUN)
    old_run_row = confirmation(per_run_confirmation_hash("kv_put", "1", "c1")).model_copy(
        update={"hash_scheme": "c1"}
    )
    decision = decide(ToolRegistry([per_run]), prop, confirmations=[old_run_row])
    assert isinstance(decision, Execute)


def test_per_run_confirmation_is_reusable(kit):
    contract = kit.kv_contract(confirmation=ConfirmationMode.PER_RUN)
    registry = ToolRegistry([contract])
    c = confirmation(per_run_confirmation_hash("kv_put", "1"), cid="crun")
    for i, args in enumerate([{"key": "a", "value": 1}, {"key": "b", "value": "x"}]):
        decision = decide(registry, proposal("kv_put", args, pid=f"p{i}"), confirmations=[c])
        assert isinstance(decision, Execute)
        assert decision.command.confirmation_id == "crun"
        assert decision.command.consume_confirmation is False
    # A per-call approval of one exact proposal is not a per-run approval.
    exact = confirmation(proposal_hash("kv_put", "1", {"key": "a", "value": 1}))
    decision = decide(registry, proposal("kv_put", {"key": "a", "value": 1}), confirmations=[exact])
    assert isinstance(decision, NeedsConfirmation)


# ---- state -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["waiting_confirmation", "cancelling", "completed", "created"])
def test_run_not_running(registry, status):
    decision = decide(
        registry, proposal("search_public", {"query": "x"}), run=run_view(status=status)
    )
    assert_reject(decision, "state", "RUN_NOT_RUNNING")


def test_unresolved_unknown_effect_stops(registry):
    decision = decide(
        registry, proposal("search_public", {"query": "x"}), run=run_view(unresolved_effects=1)
    )
    assert isinstance(decision, Stop)
    assert (decision.layer, decision.reason) == ("state", "UNRESOLVED_UNKNOWN_EFFECT")


# ---- budget ------------------------------------------------------------------------------------


def test_max_tool_calls_reached(registry):
    decision = decide(
        registry,
        proposal("search_public", {"query": "x"}),
        run=run_view(tool_calls=5, max_tool_calls=5),
    )
    assert isinstance(decision, Stop)
    assert (decision.layer, decision.reason) == ("budget", "MAX_TOOL_CALLS_REACHED")
    ok = decide(
        registry,
        proposal("search_public", {"query": "x"}),
        run=run_view(tool_calls=4, max_tool_calls=5),
    )
    assert isinstance(ok, Execute)


def test_deadline_reached(registry):
    for now in (DEADLINE, DEADLINE + 1):
        decision = decide(registry, proposal("search_public", {"query": "x"}), now=now)
        assert isinstance(decision, Stop)
        assert (decision.layer, decision.reason) == ("budget", "DEADLINE_REACHED")


def test_command_deadline_is_min_of_run_deadline_and_tool_timeout(registry):
    # search_public has timeout_ms=2000.
    far = decide(registry, proposal("search_public", {"query": "x"}), now=NOW)
    assert far.command.deadline_ms == NOW + 2_000
    near_now = DEADLINE - 500
    near = decide(registry, proposal("search_public", {"query": "x"}), now=near_now)
    assert near.command.deadline_ms == DEADLINE


# ---- the command and the order of layers --------------------------------------------------------


def test_executable_command_cannot_be_built_outside_the_gate():
    fields = {
        "command_id": "x",
        "run_id": RUN_ID,
        "proposal_id": "p1",
        "tool_name": "kv_put",
        "tool_version": "1",
        "validated_arguments": {},
        "arguments_hash": "0" * 64,
        "proposal_hash": "0" * 64,
        "idempotency_token": "0" * 64,
        "resource": None,
        "deadline_ms": 1,
        "granted_capabilities": ("kv:write",),
        "grant_ids": (),
        "confirmation_id": None,
        "consume_confirmation": False,
    }
    with pytest.raises(TypeError):
        ExecutableCommand(**fields)
    with pytest.raises(TypeError):
        ExecutableCommand(**fields, _seal=object())


def test_command_is_frozen(registry):
    decision = decide(registry, proposal("search_public", {"query": "x"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.command.tool_name = "kv_put"


def test_command_cannot_be_forged_from_a_gated_one(registry):
    # dataclasses.replace re-runs __init__ with every init field of the original, seal included:
    # it must not turn an approved search into a command the gate never saw.
    decision = decide(registry, proposal("search_public", {"query": "x"}))
    with pytest.raises(TypeError):
        dataclasses.replace(
            decision.command,
            tool_name="write_artifact",
            validated_arguments={"path": "/etc/passwd", "body": "x"},
        )


def test_earliest_failing_layer_wins(registry):
    # Unknown memory key (semantic) + no capability + no confirmation + no budget + past deadline.
    decision = decide(
        registry,
        proposal("save_preference", {"key": "auto_approve", "value": "true"}),
        grants=[],
        confirmations=[],
        run=run_view(tool_calls=9, max_tool_calls=1, unresolved_effects=1),
        now=DEADLINE + 1,
    )
    assert_reject(decision, "semantic", "MEMORY_KEY_NOT_ALLOWED")


@pytest.mark.parametrize(
    ("grants", "confirmations", "run", "expected"),
    [
        ([], [], run_view(status="completed"), ("authorization", "MISSING_CAPABILITY")),
        (PREF_GRANTS, [], run_view(status="completed"), "needs-confirmation"),
        (
            PREF_GRANTS,
            [confirmation(PREF_HASH)],
            run_view(status="completed", tool_calls=9),
            ("state", "RUN_NOT_RUNNING"),
        ),
        (
            PREF_GRANTS,
            [confirmation(PREF_HASH)],
            run_view(unresolved_effects=1, tool_calls=9),
            ("state", "UNRESOLVED_UNKNOWN_EFFECT"),
        ),
    ],
)
def test_layer_order_for_valid_arguments(registry, grants, confirmations, run, expected):
    decision = (
        decide_pref(registry, confirmations, run=run)
        if grants
        else decide(registry, proposal("save_preference", PREF_ARGS), grants=grants, run=run)
    )
    if expected == "needs-confirmation":
        assert isinstance(decision, NeedsConfirmation)
    elif isinstance(decision, Reject):
        assert (decision.layer, decision.code) == expected
    else:
        assert isinstance(decision, Stop)
        assert (decision.layer, decision.reason) == expected


def test_gate_never_calls_a_tool(kit, registry):
    for args in ({"query": "x"}, {"query": "x", "bad": 1}):
        decide(registry, proposal("search_public", args))
    decide_pref(registry, [confirmation(PREF_HASH)])
    assert sum(kit.calls.values()) == 0


_segments = st.sampled_from(["run-output", "..", ".", "", "a", "b.txt", "/", "\\", "etc"])


def _derive(path: str) -> tuple[str | None, str | None]:
    facts = CallFacts(run_id=RUN_ID, subject=SUBJECT, step=1)
    try:
        return PathResource().derive({"path": path}, facts), None
    except ResourceError as exc:
        return None, exc.code


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(_segments, min_size=1, max_size=6), lead=st.sampled_from(["", "/", "./"]))
def test_an_accepted_path_never_leaves_the_root(parts, lead):
    resource, code = _derive(lead + "/".join(parts))
    if resource is None:
        assert code in ("PATH_OUTSIDE_ROOT", "INVALID_PATH")
        return
    assert resource.startswith("run-output/")
    assert resource != "run-output/"
    assert ".." not in resource.split("/")
    assert "\\" not in resource
    assert posixpath.normpath(resource) == resource
