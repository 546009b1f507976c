"""Tool policy as configuration at the gate (issue 12 item 3): pure, no Django, microseconds.

Each confirmation policy, ``when_untrusted`` and the argument rules over the provenance the
runtime computed (issue 23: the planner's citations play no part at the gate),
``outside_constraints`` with each constraint kind, the strictness order a profile may only
tighten, and the checks that turn a bad configuration into a clear refusal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from policy.domain.confirmation.approvers import ApproverRule
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContract
from policy.domain.decisions import Execute, NeedsConfirmation, Reject
from policy.domain.gate import RunView, evaluate
from policy.domain.grants import MAX_PATTERN_INPUT, Constraint
from policy.domain.observations import TrustLabel
from policy.domain.origins.provenance import ArgumentProvenance, LeafProvenance, Origin
from policy.domain.outcomes import ToolOutcome
from policy.domain.proposals import ActionProposal, parse_planner_output
from policy.domain.registry import ToolRegistry
from policy.domain.tool_policy import (
    EMPTY,
    PROVENANCE_OVERFLOW,
    PROVENANCE_UNKNOWN,
    UNTRUSTED_ARGUMENT_REFUSED,
    UNTRUSTED_PROVENANCE,
    ToolFacts,
    ToolPolicy,
    ToolPolicyInvalid,
    check_profile_policy,
    effective_policy,
    join_approvers,
    join_confirmation,
    parse_tool_policy,
    tool_facts,
)
from tests.domain.toolkit import RUN_ID, Toolkit, grant, harness, run_view, tool

NOW = 1_000_000
UNTRUSTED = TrustLabel.UNTRUSTED_CONTENT.value
TRUSTED = TrustLabel.TRUSTED_TOOL.value


def _probe(args: dict[str, Any], ctx: Any) -> ToolOutcome:
    return ToolOutcome.succeeded({"ok": True})


# One optional argument of any JSON type: the constraint (not the schema) must decide.
PROBE = ToolContract(
    name="probe",
    version="1",
    description="Accepts one optional value of any JSON type.",
    input_schema={
        "type": "object",
        "properties": {
            "value": {
                "type": ["string", "integer", "number", "boolean", "array", "null"],
            },
            "other": {"type": "string"},
        },
        "additionalProperties": False,
    },
    output_schema={"type": "object"},
    required_capabilities=("probe:call",),
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    confirmation=ConfirmationMode.PER_CALL,
    timeout_ms=1_000,
    execute=_probe,
)
KIT = Toolkit()
REGISTRY = ToolRegistry([PROBE, KIT.kv_contract(), KIT.search_contract()])
FACTS = tool_facts(REGISTRY)


def policy(raw: dict[str, Any]) -> ToolPolicy:
    return parse_tool_policy(raw, tools=FACTS)


def proposal(arguments: Any, *, name: str = "kv_put", sources: Any = ("user-1",)) -> ActionProposal:
    out = parse_planner_output(tool("p1", name, arguments, sources=sources))
    assert isinstance(out, ActionProposal)
    return out


def gate(
    prop: ActionProposal,
    tool_policy: ToolPolicy,
    *,
    provenance: ArgumentProvenance | None = None,
    confirmations: tuple[Confirmation, ...] = (),
    grants: tuple[Any, ...] | None = None,
) -> Any:
    run: RunView = dataclasses.replace(run_view(NOW + 60_000), tool_policy=tool_policy)
    return evaluate(
        prop,
        run=run,
        grants=grants if grants is not None else (grant("kv:write"), grant("probe:call")),
        confirmations=confirmations,
        registry=REGISTRY,
        now_ms=NOW,
        provenance=provenance,
    )


KV = {"key": "color", "value": "blue"}
WHEN_UNTRUSTED = policy({"kv_put": {"confirmation": "when_untrusted"}})


def prov(*, overflow: bool = False, **tainted: str) -> ArgumentProvenance:
    """The provenance of KV's arguments: each named argument derives from that observation."""
    leaves = []
    for name in ("key", "value"):
        ids = (tainted[name],) if name in tainted else ()
        origins = tuple(Origin("untrusted", i) for i in ids)
        leaves.append(LeafProvenance(name, name, origins, ids))
    return ArgumentProvenance(tuple(leaves), overflow=overflow)


# ---- when_untrusted: an argument derives from untrusted content ------------------------------


@pytest.mark.parametrize("sources", [["search-1"], ["user-1"], [], ["tool-99"]])
def test_when_untrusted_asks_only_for_untrusted_derived_arguments_whatever_is_cited(sources):
    """The gate reads the runtime's provenance, never the citations: citing the untrusted
    search does not make a clean call wait, citing only the request does not free a tainted
    one."""
    prop = proposal(KV, sources=sources)
    clean = gate(prop, WHEN_UNTRUSTED, provenance=prov())
    assert isinstance(clean, Execute), clean
    assert clean.command.confirmation_id is None
    tainted = gate(prop, WHEN_UNTRUSTED, provenance=prov(value="search-1"))
    assert isinstance(tainted, NeedsConfirmation), tainted
    assert (tainted.trigger, tainted.untrusted_ids, tainted.untrusted_arguments) == (
        UNTRUSTED_PROVENANCE,
        ("search-1",),
        ("value",),
    )
    assert tainted.confirmation_hash == prop.hash()  # the exact call, per call


def test_when_untrusted_without_the_facts_fails_closed():
    decision = gate(proposal(KV), WHEN_UNTRUSTED, provenance=None)
    assert isinstance(decision, NeedsConfirmation)
    assert decision.trigger == PROVENANCE_UNKNOWN


def test_an_approved_exact_confirmation_lets_the_tainted_call_run_once():
    prop = proposal(KV, sources=["search-1"])
    approved = Confirmation(
        confirmation_id="c1",
        run_id=RUN_ID,
        proposal_hash=prop.hash(),
        status=ConfirmationStatus.APPROVED,
        expires_at_step=10,
        tool_name="kv_put",
    )
    tainted = prov(value="search-1")
    decision = gate(prop, WHEN_UNTRUSTED, provenance=tainted, confirmations=(approved,))
    assert isinstance(decision, Execute)
    assert (decision.command.confirmation_id, decision.command.consume_confirmation) == ("c1", True)
    # Approved for other arguments: never transferable.
    other = proposal({"key": "color", "value": "red"}, sources=["search-1"])
    decision = gate(other, WHEN_UNTRUSTED, provenance=tainted, confirmations=(approved,))
    assert isinstance(decision, NeedsConfirmation)


# ---- argument rules (issue 23 item 3) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "tainted", "expected"),
    [
        # refuse: no person is asked; the call is refused at the confirmation layer.
        ({"arguments": {"key": "refuse"}}, {"key": "s-1"}, UNTRUSTED_ARGUMENT_REFUSED),
        ({"arguments": {"key": "refuse"}}, {"value": "s-1"}, None),
        # confirm on one argument, whatever the policy's mode.
        ({"arguments": {"key": "confirm"}}, {"key": "s-1"}, UNTRUSTED_PROVENANCE),
        ({"confirmation": "never", "arguments": {"key": "confirm"}}, {"key": "s-1"}, "asks"),
        # when_untrusted: every argument asks, but one that may carry untrusted content.
        ({"confirmation": "when_untrusted", "arguments": {"value": "carry"}}, {"value": "s"}, None),
        ({"confirmation": "when_untrusted", "arguments": {"value": "carry"}}, {"key": "s"}, "asks"),
        # Refuse beats confirm when both arguments are tainted.
        (
            {"arguments": {"key": "refuse", "value": "confirm"}},
            {"key": "s-1", "value": "s-2"},
            UNTRUSTED_ARGUMENT_REFUSED,
        ),
    ],
)
def test_argument_rules_refuse_confirm_or_carry(entry, tainted, expected):
    decision = gate(proposal(KV), policy({"kv_put": entry}), provenance=prov(**tainted))
    if expected is None:
        assert isinstance(decision, Execute), decision
    elif expected == UNTRUSTED_ARGUMENT_REFUSED:
        assert isinstance(decision, Reject), decision
        assert (decision.layer, decision.code) == ("confirmation", UNTRUSTED_ARGUMENT_REFUSED)
        assert "key" in decision.message
    else:
        assert isinstance(decision, NeedsConfirmation), decision
        assert decision.trigger == UNTRUSTED_PROVENANCE


def _ruled_kv(rules: dict[str, str]) -> ToolRegistry:
    return ToolRegistry([dataclasses.replace(KIT.kv_contract(), untrusted_arguments=rules)])


def test_the_contracts_own_argument_rules_apply_unless_the_policy_says_never():
    registry = _ruled_kv({"key": "refuse"})
    run = run_view(NOW + 60_000)

    def decide(tool_policy: ToolPolicy) -> Any:
        return evaluate(
            proposal(KV),
            run=dataclasses.replace(run, tool_policy=tool_policy),
            grants=(grant("kv:write"),),
            confirmations=(),
            registry=registry,
            now_ms=NOW,
            provenance=prov(key="s-1"),
        )

    assert isinstance(decide(EMPTY), Reject)
    assert isinstance(decide(policy({"kv_put": {"confirmation": "when_untrusted"}})), Reject)
    # A policy naming the argument wins; "never" is the deployment's explicit choice.
    named = policy({"kv_put": {"arguments": {"key": "confirm"}}})
    assert isinstance(decide(named), NeedsConfirmation)
    assert isinstance(decide(policy({"kv_put": {"confirmation": "never"}})), Execute)


def test_an_overflowed_index_makes_every_write_ask_even_what_may_carry():
    carry = policy({"kv_put": {"confirmation": "when_untrusted", "arguments": {"value": "carry"}}})
    decision = gate(proposal(KV), carry, provenance=prov(overflow=True))
    assert isinstance(decision, NeedsConfirmation)
    assert decision.trigger == PROVENANCE_OVERFLOW
    assert decision.untrusted_arguments == ("key", "value")
    # "never" stays never; a read (no effect) under no rule runs.
    never = gate(
        proposal(KV), policy({"kv_put": {"confirmation": "never"}}), provenance=prov(overflow=True)
    )
    assert isinstance(never, Execute)
    read = gate(
        proposal({"query": "x"}, name="search_public"),
        EMPTY,
        provenance=ArgumentProvenance((), overflow=True),
        grants=(grant("search:public"),),
    )
    assert isinstance(read, Execute)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"kv_put": {"arguments": {"colour": "refuse"}}}, "takes no argument 'colour'"),
        ({"kv_put": {"arguments": {"key": "deny"}}}, "kv_put.arguments.key"),
        ({"kv_put": {"arguments": {"key": 1}}}, "kv_put.arguments.key"),
    ],
)
def test_a_bad_argument_rule_is_refused(raw, message):
    with pytest.raises(ToolPolicyInvalid, match=message):
        policy(raw)


def test_a_profile_may_only_raise_an_argument_rule_and_joins_take_the_stricter():
    deployment = policy({"kv_put": {"arguments": {"key": "confirm"}}})
    with pytest.raises(ToolPolicyInvalid, match="argument 'key'"):
        check_profile_policy(
            policy({"kv_put": {"arguments": {"key": "carry"}}}), deployment=deployment, tools=FACTS
        )
    tighter = policy({"kv_put": {"arguments": {"key": "refuse", "value": "confirm"}}})
    check_profile_policy(tighter, deployment=deployment, tools=FACTS)
    joined = effective_policy(deployment, tighter, tools=FACTS).data()["kv_put"]
    assert joined["arguments"] == {"key": "refuse", "value": "confirm"}
    # The contract's own rule is the floor where the deployment names none.
    ruled = tool_facts(_ruled_kv({"value": "refuse"}))
    with pytest.raises(ToolPolicyInvalid, match="argument 'value'"):
        check_profile_policy(
            parse_tool_policy({"kv_put": {"arguments": {"value": "confirm"}}}, tools=ruled),
            deployment=EMPTY,
            tools=ruled,
        )


# ---- always / never / the contract's own mode ---------------------------------------------------


def test_always_asks_for_a_read_that_never_asked():
    decision = gate(
        proposal({"query": "x"}, name="search_public"),
        policy({"search_public": {"confirmation": "always"}}),
        grants=(grant("search:public"),),
    )
    assert isinstance(decision, NeedsConfirmation)
    assert decision.trigger == "TOOL_POLICY_ALWAYS"


def test_never_is_the_deployments_explicit_choice_over_a_per_call_contract():
    prop = proposal({"value": 1}, name="probe")
    assert isinstance(gate(prop, EMPTY), NeedsConfirmation)  # the contract: per call
    decision = gate(prop, policy({"probe": {"confirmation": "never"}}))
    assert isinstance(decision, Execute)


def test_a_tool_the_policy_does_not_name_keeps_its_contract_mode():
    prop = proposal({"value": 1}, name="probe")
    decision = gate(prop, WHEN_UNTRUSTED)  # names kv_put only
    assert isinstance(decision, NeedsConfirmation)
    assert decision.trigger is None


def test_policy_never_skips_an_authorization_layer():
    """The policy decides confirmation only: a call without its grant is still refused."""
    decision = gate(
        proposal({"value": 1}, name="probe"),
        policy({"probe": {"confirmation": "never"}}),
        grants=(),
    )
    assert isinstance(decision, Reject)
    assert decision.layer == "authorization"


# ---- outside_constraints, and the constraint vocabulary (grant and auto alike) ---------------

# (constraint, arguments, allowed). JSON types throughout: True is not 1, 1 is 1.0.
CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("equals-int", {"equals": 1}, {"value": 1}, True),
    ("equals-float-is-int", {"equals": 1}, {"value": 1.0}, True),
    ("equals-true-is-not-1", {"equals": 1}, {"value": True}, False),
    ("equals-1-is-not-true", {"equals": True}, {"value": 1}, False),
    ("equals-absent", {"equals": 1}, {}, False),
    ("equals-wrong-type", {"equals": 1}, {"value": "1"}, False),
    ("one_of-hit", {"one_of": ["a", 2]}, {"value": 2.0}, True),
    ("one_of-true-is-not-1", {"one_of": [1, "a"]}, {"value": True}, False),
    ("one_of-absent", {"one_of": [1]}, {}, False),
    ("prefix-hit", {"prefix": "ab"}, {"value": "abc"}, True),
    ("prefix-miss", {"prefix": "ab"}, {"value": "xab"}, False),
    ("prefix-wrong-type", {"prefix": "1"}, {"value": 12}, False),
    ("prefix-absent", {"prefix": "ab"}, {}, False),
    ("maximum-int", {"maximum": 5}, {"value": 5}, True),
    ("maximum-float", {"maximum": 5}, {"value": 5.0}, True),
    ("maximum-over", {"maximum": 5}, {"value": 5.5}, False),
    ("maximum-true-is-not-1", {"maximum": 5}, {"value": True}, False),
    ("maximum-wrong-type", {"maximum": 5}, {"value": "1"}, False),
    ("maximum-absent", {"maximum": 5}, {}, False),
    ("absent_or-absent", {"absent_or": {"equals": 1}}, {}, True),
    ("absent_or-holds", {"absent_or": {"equals": 1}}, {"value": 1.0}, True),
    ("absent_or-true-is-not-1", {"absent_or": {"equals": 1}}, {"value": True}, False),
    ("absent_or-null-is-present", {"absent_or": {"equals": 1}}, {"value": None}, False),
    ("subset_of-hit", {"subset_of": [1, "a"]}, {"value": [1.0, "a", 1]}, True),
    ("subset_of-empty", {"subset_of": [1]}, {"value": []}, True),
    ("subset_of-true-is-not-1", {"subset_of": [1]}, {"value": [True]}, False),
    ("subset_of-not-a-list", {"subset_of": [1]}, {"value": 1}, False),
    ("subset_of-absent", {"subset_of": [1]}, {}, False),
    (
        "url_host_in-hit",
        {"url_host_in": ["docs.example.org"]},
        {"value": "https://DOCS.example.org./a"},
        True,
    ),
    (
        "url_host_in-other-host",
        {"url_host_in": ["docs.example.org"]},
        {"value": "https://evil.example/a"},
        False,
    ),
    (
        "url_host_in-userinfo",
        {"url_host_in": ["docs.example.org"]},
        {"value": "https://docs.example.org@evil.example/"},
        False,
    ),
    (
        "url_host_in-suffix",
        {"url_host_in": ["example.org"]},
        {"value": "https://evilexample.org/"},
        False,
    ),
    (
        "url_host_in-scheme",
        {"url_host_in": ["docs.example.org"]},
        {"value": "ftp://docs.example.org/"},
        False,
    ),
    ("url_host_in-wrong-type", {"url_host_in": ["docs.example.org"]}, {"value": 1}, False),
    ("url_host_in-absent", {"url_host_in": ["docs.example.org"]}, {}, False),
    ("pattern-full-match", {"pattern": "[a-z]+-[0-9]{2}"}, {"value": "ab-12"}, True),
    ("pattern-not-a-search", {"pattern": "[a-z]+-[0-9]{2}"}, {"value": "xx ab-12 yy"}, False),
    ("pattern-trailing-newline", {"pattern": "[a-z]+"}, {"value": "abc\n"}, False),
    ("pattern-ascii-digits-only", {"pattern": "[0-9]+|\\d+"}, {"value": "\uff11\uff12"}, False),
    ("pattern-alternation-anchored", {"pattern": "a|b"}, {"value": "ab"}, False),
    ("pattern-wrong-type", {"pattern": "1"}, {"value": 1}, False),
    ("pattern-absent", {"pattern": "a*"}, {}, False),
    ("pattern-too-long-input", {"pattern": "a*"}, {"value": "a" * (MAX_PATTERN_INPUT + 1)}, False),
]


@pytest.mark.parametrize(
    ("constraint", "arguments", "allowed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_constraint_as_a_grant_constraint(constraint, arguments, allowed):
    g = grant("probe:call", constraints={"value": Constraint.model_validate(constraint)})
    decision = gate(
        proposal(arguments, name="probe"),
        policy({"probe": {"confirmation": "never"}}),
        grants=(g,),
    )
    if allowed:
        assert isinstance(decision, Execute), decision
    else:
        assert isinstance(decision, Reject), decision
        assert decision.code == "CAPABILITY_CONSTRAINT_VIOLATED"


@pytest.mark.parametrize(
    ("constraint", "arguments", "allowed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_constraint_as_an_auto_constraint(constraint, arguments, allowed):
    """``outside_constraints``: inside the auto constraints the call runs; outside it needs
    the exact-hash confirmation (never a rejection: a person may still allow it)."""
    p = policy(
        {
            "probe": {
                "confirmation": "outside_constraints",
                "auto_constraints": {"value": constraint},
            }
        }
    )
    prop = proposal(arguments, name="probe")
    decision = gate(prop, p)
    if allowed:
        assert isinstance(decision, Execute), decision
    else:
        assert isinstance(decision, NeedsConfirmation), decision
        assert decision.trigger == "OUTSIDE_AUTO_CONSTRAINTS"
        assert decision.confirmation_hash == prop.hash()


def test_a_pattern_that_would_backtrack_is_still_decided():
    """``(a|a)*b`` is catastrophic for a backtracking engine; the linear-time one answers."""
    c = Constraint(pattern="(a|a)*b")
    assert not c.allows(True, "a" * 4_000 + "c")
    assert c.allows(True, "aaab")


@pytest.mark.parametrize(
    "pattern",
    [
        "(a)\\1",  # backreference: not linear-time
        "(?=a)a",  # lookahead
        "(?x)a#",  # a flag that would comment out the anchoring
        "a)|(b",  # would escape the full-match group
        "[",
        "",
        "a" * 257,
        "a{1000}{1000}",  # compiles too large
        "a\nb",
    ],
    ids=[
        "backref",
        "lookahead",
        "flag",
        "group-escape",
        "unclosed",
        "empty",
        "long",
        "huge",
        "ctrl",
    ],
)
def test_a_pattern_the_engine_cannot_bound_is_refused(pattern):
    with pytest.raises(ValueError, match="pattern"):
        Constraint(pattern=pattern)


# ---- configuration: validation, strictness, the run's effective policy ----------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "must be an object"),
        ({"no_such_tool": {}}, "no registered tool 'no_such_tool'"),
        ({"kv_put": "always"}, "kv_put must be an object"),
        ({"kv_put": {"confirm": "always"}}, "kv_put.confirm"),
        ({"kv_put": {"confirmation": "sometimes"}}, "kv_put.confirmation"),
        ({"kv_put": {"approvers": "anyone"}}, "kv_put.approvers"),
        ({"kv_put": {"confirmation": "outside_constraints"}}, "at least one auto_constraint"),
        (
            {"kv_put": {"confirmation": "always", "auto_constraints": {"key": {"equals": "a"}}}},
            "only with confirmation 'outside_constraints'",
        ),
        (
            {
                "kv_put": {
                    "confirmation": "outside_constraints",
                    "auto_constraints": {"nope": {"equals": "a"}},
                }
            },
            "takes no argument 'nope'",
        ),
        (
            {
                "kv_put": {
                    "confirmation": "outside_constraints",
                    "auto_constraints": {"key": {"equals": "a", "prefix": "b"}},
                }
            },
            "exactly one",
        ),
        (
            {
                "kv_put": {
                    "confirmation": "outside_constraints",
                    "auto_constraints": {"key": {"pattern": "(a)\\1"}},
                }
            },
            "linear-time",
        ),
    ],
    ids=[
        "not-a-mapping",
        "unknown-tool",
        "entry-not-a-mapping",
        "unknown-key",
        "unknown-confirmation",
        "unknown-approvers",
        "outside-without-constraints",
        "constraints-without-outside",
        "unknown-argument",
        "two-kinds",
        "bad-pattern",
    ],
)
def test_a_bad_policy_is_refused_with_the_reason(raw, message):
    with pytest.raises(ToolPolicyInvalid, match=message) as exc:
        policy(raw)
    assert exc.value.code == "TOOL_POLICY_INVALID"


def test_the_parsed_policy_is_read_only_and_round_trips():
    raw = {
        "kv_put": {
            "confirmation": "outside_constraints",
            "auto_constraints": {"key": {"one_of": ["a", "b"]}},
            "approvers": "owner",
        }
    }
    p = policy(raw)
    assert p.data() == raw
    with pytest.raises(TypeError):
        p.entries["probe"] = p.entries["kv_put"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.entries = {}  # type: ignore[misc]


@pytest.mark.parametrize(
    ("a", "b", "joined"),
    [
        ("never", "when_untrusted", "when_untrusted"),
        ("outside_constraints", "never", "outside_constraints"),
        ("when_untrusted", "outside_constraints", "always"),
        ("per-run", "when_untrusted", "always"),
        ("per-run", "never", "per-run"),
        ("always", "never", "always"),
    ],
)
def test_confirmation_strictness_join(a, b, joined):
    assert join_confirmation(a, b) == join_confirmation(b, a) == joined


@pytest.mark.parametrize(
    ("a", "b", "joined"),
    [
        ("owner_or_operator", "owner", "owner"),
        ("operator", "owner_or_operator", "operator"),
        ("owner", "operator", "four_eyes"),
        ("four_eyes", "owner", "four_eyes"),
    ],
)
def test_approvers_strictness_join(a, b, joined):
    assert join_approvers(a, b) == join_approvers(b, a) == joined


DEPLOYMENT = policy(
    {
        "kv_put": {
            "confirmation": "outside_constraints",
            "auto_constraints": {"key": {"prefix": "notes/"}},
            "approvers": "operator",
        },
        "search_public": {"confirmation": "when_untrusted"},
    }
)


@pytest.mark.parametrize(
    ("profile", "allowed"),
    [
        ({"kv_put": {"confirmation": "always"}}, True),
        ({"search_public": {"confirmation": "always", "approvers": "four_eyes"}}, True),
        (
            {
                "kv_put": {
                    "confirmation": "outside_constraints",
                    "auto_constraints": {"value": {"maximum": 3}},
                }
            },
            True,
        ),
        ({"kv_put": {"approvers": "four_eyes"}}, True),
        ({"kv_put": {"confirmation": "never"}}, False),
        ({"kv_put": {"confirmation": "when_untrusted"}}, False),  # incomparable
        ({"search_public": {"confirmation": "never"}}, False),
        ({"kv_put": {"approvers": "owner"}}, False),
        ({"kv_put": {"approvers": "owner_or_operator"}}, False),
        (
            {
                "kv_put": {
                    "confirmation": "outside_constraints",
                    "auto_constraints": {"key": {"prefix": "notes/a"}},
                }
            },
            False,  # one argument constrained twice does not merge
        ),
        ({"probe": {"confirmation": "when_untrusted"}}, False),  # the contract asks per call
        ({"probe": {"confirmation": "always"}}, True),
    ],
)
def test_a_profile_may_only_tighten_the_deployment(profile, allowed):
    p = policy(profile)
    if allowed:
        check_profile_policy(p, deployment=DEPLOYMENT, tools=FACTS)
    else:
        with pytest.raises(ToolPolicyInvalid) as exc:
            check_profile_policy(p, deployment=DEPLOYMENT, tools=FACTS)
        assert exc.value.code == "TOOL_POLICY_LOOSENS"


def test_the_effective_policy_is_never_looser_than_either():
    profile = policy(
        {
            "kv_put": {
                "confirmation": "outside_constraints",
                "auto_constraints": {"value": {"maximum": 3}},
                "approvers": "owner",
            },
            "probe": {"confirmation": "never"},  # loosens the contract: joined back to always
        }
    )
    joined = effective_policy(DEPLOYMENT, profile, tools=FACTS)
    assert (joined.approvers_for("kv_put"), joined.approvers_for("search_public")) == (
        "four_eyes",
        None,
    )
    eff = joined.data()
    assert eff["kv_put"] == {
        "confirmation": "outside_constraints",
        "auto_constraints": {"key": {"prefix": "notes/"}, "value": {"maximum": 3}},
        "approvers": "four_eyes",  # owner ⊔ operator
    }
    assert eff["search_public"] == {"confirmation": "when_untrusted"}
    assert eff["probe"] == {"confirmation": "always"}
    # Under the joined policy both auto constraints must hold.
    run_policy = effective_policy(DEPLOYMENT, profile, tools=FACTS)
    inside = gate(proposal({"key": "notes/a", "value": 2}), run_policy)
    assert isinstance(inside, Execute)
    assert isinstance(gate(proposal({"key": "notes/a", "value": 4}), run_policy), NeedsConfirmation)
    assert isinstance(gate(proposal({"key": "other", "value": 2}), run_policy), NeedsConfirmation)


def test_tool_facts_take_the_strictest_version():
    per_call = KIT.kv_contract(confirmation=ConfirmationMode.PER_CALL, version="2")
    facts = tool_facts([KIT.kv_contract(), per_call])
    assert facts["kv_put"] == ToolFacts(frozenset({"key", "value"}), "always")


# ---- a tool labels its own parts ----------------------------------------------------------------


def test_part_labels_must_name_parts_of_the_value():
    ToolOutcome.succeeded({"rows": [], "comment": "x"}, part_trust={"comment": UNTRUSTED})
    with pytest.raises(ValueError, match="top-level keys"):
        ToolOutcome.succeeded({"rows": []}, part_trust={"comment": UNTRUSTED})


def _labelled(ceiling: TrustLabel, labels: dict[str, Any]) -> ToolContract:
    def execute(args: dict[str, Any], ctx: Any) -> ToolOutcome:
        return ToolOutcome.succeeded(
            {"rows": [1], "text": "retrieved", "proposal": ctx.proposal_id}, part_trust=labels
        )

    return dataclasses.replace(
        KIT.search_contract(), execute=execute, output_trust=ceiling, output_schema={}
    )


@pytest.mark.parametrize(
    ("ceiling", "labels", "trust", "parts"),
    [
        # A trusted tool marks the retrieved part: the observation is untrusted as a whole.
        (
            TrustLabel.TRUSTED_TOOL,
            {"text": UNTRUSTED},
            UNTRUSTED,
            {"proposal": TRUSTED, "rows": TRUSTED, "text": UNTRUSTED},
        ),
        # Labels never raise trust above the contract's ceiling, nor speak as user or policy.
        (
            TrustLabel.UNTRUSTED_CONTENT,
            {"rows": TRUSTED, "text": "user"},
            UNTRUSTED,
            {"proposal": UNTRUSTED, "rows": UNTRUSTED, "text": UNTRUSTED},
        ),
        (TrustLabel.TRUSTED_TOOL, {"rows": "policy"}, TRUSTED, None),
    ],
    ids=["lowered", "capped-at-untrusted", "capped-at-trusted"],
)
def test_a_tool_labels_parts_no_more_trusted_than_its_contract(ceiling, labels, trust, parts):
    h = harness(
        [tool("p7", "search_public", {"query": "x"})],
        [_labelled(ceiling, labels)],
        max_steps=1,
    )
    h.advance()
    obs = h.observation("tool-1")
    assert obs.trust.value == trust
    expected = parts or {"proposal": TRUSTED, "rows": TRUSTED, "text": TRUSTED}
    assert obs.content["part_trust"] == expected
    assert obs.content["value"]["proposal"] == "p7"  # the context named the proposal
    (validated,) = h.events("tool.result.validated")
    assert validated["details"]["untrusted_parts"] == [
        k for k, v in expected.items() if v == UNTRUSTED
    ]


@pytest.mark.parametrize("sources", [["tool-1"], ["user-1"], []])
@pytest.mark.parametrize(
    ("value", "waits"),
    [("Retry a failed call at most three times.", True), ("three tries", False)],
    ids=["copied-from-the-search", "the-planners-own"],
)
def test_a_run_under_when_untrusted_on_the_in_memory_store(sources, value, waits):
    """Whatever the planner cites, the write waits exactly when its value was read in the
    untrusted search result."""
    kit = Toolkit()
    h = harness(
        [
            tool("p1", "search_public", {"query": "retry"}),
            tool("p2", "kv_put", {"key": "rule", "value": value}, sources=sources),
            {"kind": "final", "answer": "done", "citation_observation_ids": ["tool-2"]},
        ],
        kit=kit,
        tool_policy={"kv_put": {"confirmation": "when_untrusted"}},
    )
    state = h.advance()
    assert (state.status.value == "waiting_confirmation") is waits
    assert kit.calls["kv_put"] == (0 if waits else 1)


def test_one_argument_constrained_twice_joins_to_always_unless_json_equal():
    """A deployment changed after the profile was saved: the same argument constrained by
    both. ``{"equals": 1}`` and ``{"equals": true}`` are different constraints (JSON type)."""
    deployment = policy(
        {
            "kv_put": {
                "confirmation": "outside_constraints",
                "auto_constraints": {"value": {"equals": 1}},
            }
        }
    )
    for other, joined in [
        ({"equals": True}, {"confirmation": "always"}),
        ({"equals": 1.0}, deployment.data()["kv_put"]),
    ]:
        profile = policy(
            {
                "kv_put": {
                    "confirmation": "outside_constraints",
                    "auto_constraints": {"value": other},
                }
            }
        )
        assert effective_policy(deployment, profile, tools=FACTS).data()["kv_put"] == joined


# ---- the approver rule: contract, tightened by the run's tool policy ---------------------------


@pytest.mark.parametrize(
    ("contract_rule", "policy_rule", "chosen"),
    [
        ("owner_or_operator", None, "owner_or_operator"),
        ("owner_or_operator", "operator", "operator"),
        ("owner_or_operator", "four_eyes", "four_eyes"),
        ("owner", "operator", "four_eyes"),  # neither alone is as strict as both
        ("four_eyes", "owner", "four_eyes"),  # a policy never loosens the contract's rule
        ("four_eyes", "owner_or_operator", "four_eyes"),
    ],
)
def test_the_gate_chooses_the_stricter_of_contract_and_policy_approvers(
    contract_rule: str, policy_rule: str | None, chosen: str
) -> None:
    contract = dataclasses.replace(PROBE, approvers=ApproverRule(contract_rule))
    entry: dict[str, Any] = {"confirmation": "always"}
    if policy_rule is not None:
        entry["approvers"] = policy_rule
    run = dataclasses.replace(
        run_view(NOW + 60_000),
        tool_policy=parse_tool_policy({"probe": entry}, tools=tool_facts([contract])),
    )
    decision = evaluate(
        proposal({"value": 1}, name="probe"),
        run=run,
        grants=(grant("probe:call"),),
        confirmations=(),
        registry=ToolRegistry([contract]),
        now_ms=NOW,
    )
    assert isinstance(decision, NeedsConfirmation)
    assert decision.approvers == ApproverRule(chosen)
