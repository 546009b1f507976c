"""Run profiles as plain data (runs.domain.profiles): validation with stable codes, and the
expansion of grant templates for a subject — where a hostile subject name could widen a scope."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policy.domain.grants import CapabilityGrant, authorize
from runs.domain import profiles as p

TOOLS = {
    "search_public": ("search:public",),
    "save_preference": ("memory:write",),
    "write_artifact": ("artifact:write",),
}

BASE: dict[str, Any] = {
    "name": "research",
    "description": "read-only",
    "audience": "all",
    "planner": {
        "kind": "fixture",
        "outputs": [
            {"kind": "tool", "tool_name": "search_public", "arguments": {"query": "x"}},
            {"kind": "final", "answer": "a", "citation_observation_ids": ["tool-1"]},
        ],
    },
    "tools": ["search_public", "save_preference"],
    "grant_templates": [
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 5},
        {"capability": "memory:write", "resource_scope": "{subject}", "expires_at_step": 5},
    ],
    "budgets": {"max_steps": 4, "max_tool_calls": 2, "max_repeated_proposal": 2, "deadline_s": 60},
}


def profile(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def template(scope: str, **more: Any) -> dict[str, Any]:
    return {"capability": "memory:write", "resource_scope": scope, "expires_at_step": 5, **more}


def test_a_good_profile_validates_and_keeps_its_values() -> None:
    spec = p.validate_profile(profile(), tools=TOOLS)
    assert spec.name == "research"
    assert spec.budgets.run_budgets().deadline_ms == 60_000
    assert spec.data()["grant_templates"][1] == template("{subject}")


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"name": "Has Spaces"}, "PROFILE_INVALID"),
        ({"audience": "users"}, "PROFILE_INVALID"),  # named users, but none named
        ({"audience": "everyone"}, "PROFILE_INVALID"),
        ({"tools": []}, "PROFILE_INVALID"),
        ({"tools": ["search_public", "rm_rf"]}, "PROFILE_TOOL_UNKNOWN"),
        ({"unknown_field": 1}, "PROFILE_INVALID"),
        ({"planner": {"kind": "model", "outputs": []}}, "PROFILE_PLANNER_INVALID"),
        ({"planner": {"kind": "fixture", "outputs": []}}, "PROFILE_PLANNER_INVALID"),
        ({"planner": {"kind": "fixture", "outputs": [1]}}, "PROFILE_PLANNER_INVALID"),
        (
            {"planner": {"kind": "fixture", "outputs": [{"kind": "tool", "tool_name": "x"}]}},
            "PROFILE_TOOL_NOT_ALLOWED",
        ),
        # A grant for a capability none of the profile's tools needs.
        ({"tools": ["search_public"]}, "PROFILE_TOOL_NOT_ALLOWED"),
        ({"grant_templates": [template("{user}")]}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": [template("{subject")]}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": [template("run-output/*")]}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": [template("run-output/../etc")]}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": [template("/abs/{subject}")]}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": [template("a//{subject}")]}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": [template("a {subject}")]}, "PROFILE_TEMPLATE_INVALID"),
        ({"grant_templates": [template("x", constraints={"k": {}})]}, "PROFILE_INVALID"),
        ({"grant_templates": [template("x", expires_at_step=-1)]}, "PROFILE_INVALID"),
    ],
)
def test_a_bad_profile_is_refused_with_a_stable_code(changes: dict[str, Any], code: str) -> None:
    with pytest.raises(p.ProfileInvalid) as caught:
        p.validate_profile(profile(**changes), tools=TOOLS)
    assert caught.value.code == code


@pytest.mark.parametrize(
    "field_value",
    [
        ("max_steps", "4"),  # a string is not a number
        ("max_steps", True),  # true is not 1 (JSON types, not Python's bool-is-int)
        ("deadline_s", 1.5),
    ],
)
def test_budgets_compare_by_json_type(field_value: tuple[str, Any]) -> None:
    name, value = field_value
    with pytest.raises(p.ProfileInvalid):
        p.validate_profile(profile(budgets={**BASE["budgets"], name: value}), tools=TOOLS)


def test_expiry_step_true_is_not_a_number() -> None:
    with pytest.raises(p.ProfileInvalid):
        p.validate_profile(
            profile(grant_templates=[template("{subject}", expires_at_step=True)]), tools=TOOLS
        )


def test_subject_is_substituted_into_the_scope() -> None:
    grants = p.expand_grants(BASE["grant_templates"], subject="alice")
    assert [g["resource_scope"] for g in grants] == ["public", "alice"]
    prefixed = p.expand_grants([template("reports/{subject}/drafts")], subject="bob.smith")
    assert prefixed[0]["resource_scope"] == "reports/bob.smith/drafts"


UNSAFE_SUBJECTS = ["*", "a/b", "..", "alice/..", "a..b", ".hidden", "", " alice", "al ice",
                   "a\nb", "{subject}", "alice*", "x" * 200, None, 7]  # fmt: skip


@pytest.mark.parametrize("subject", UNSAFE_SUBJECTS)
def test_a_subject_that_would_widen_the_scope_is_refused(subject: Any) -> None:
    for scope in ("{subject}", "run-output/reports/{subject}"):
        with pytest.raises(p.ProfileInvalid) as caught:
            p.expand_grants([template(scope)], subject=subject)
        assert caught.value.code == "PROFILE_SUBJECT_UNSAFE"


def test_a_fixed_scope_ignores_the_subject_value() -> None:
    # No placeholder: the subject is not part of the scope, so no value of it can widen it.
    assert p.expand_grants([template("public")], subject="alice")[0]["resource_scope"] == "public"


def test_expansion_never_yields_a_scope_that_covers_another_subject() -> None:
    (grant,) = p.expand_grants([template("{subject}")], subject="alice")
    bound = CapabilityGrant(grant_id="g1", run_id="r1", **grant)
    for resource, ok in (("alice", True), ("bob", False), ("alice2", False)):
        result = authorize(
            required=["memory:write"], grants=[bound], run_id="r1", step=1,
            resource=resource, arguments={},
        )  # fmt: skip
        assert result.ok is ok, resource


def test_constraints_keep_their_json_type_through_expansion() -> None:
    raw = [template("{subject}", constraints={"flag": {"equals": True}})]
    (grant,) = p.expand_grants(raw, subject="alice")
    assert grant["constraints"] == {"flag": {"equals": True}}
    bound = CapabilityGrant(grant_id="g1", run_id="r1", **grant)

    def allowed(value: Any) -> bool:
        return authorize(
            required=["memory:write"], grants=[bound], run_id="r1", step=1,
            resource="alice", arguments={"flag": value},
        ).ok  # fmt: skip

    assert allowed(True)
    assert not allowed(1)  # JSON true is not the number 1
    assert not allowed("true")


def test_same_profile_compares_by_json_type() -> None:
    a = {"budgets": {"max_steps": 1}, "flag": True}
    assert p.same_profile(a, {"flag": True, "budgets": {"max_steps": 1.0}})
    assert not p.same_profile(a, {"budgets": {"max_steps": 1}, "flag": 1})


def test_a_stored_template_of_the_wrong_shape_is_refused_at_expansion() -> None:
    no_expiry = {"capability": "memory:write", "resource_scope": "{subject}"}
    with pytest.raises(p.ProfileInvalid) as caught:
        p.expand_grants([no_expiry], subject="a")
    assert caught.value.code == "PROFILE_TEMPLATE_INVALID"


def test_a_profile_may_choose_the_model_planner_of_a_configured_endpoint() -> None:
    model = {"kind": "openai", "endpoint": "local", "model": "llama3.1"}
    spec = p.validate_profile(profile(planner=model), tools=TOOLS, endpoints=["local"])
    assert spec.planner == model
    assert spec.budgets.run_budgets().max_tokens == p.ProfileBudgets().max_tokens
    for bad, cause in (
        ({"kind": "openai", "endpoint": "local"}, None),  # no endpoint configured at all
        ({**model, "base_url": "http://elsewhere/v1"}, "PLANNER_CONFIG_INVALID"),
        ({**model, "api_key": "sk-x"}, "PLANNER_CONFIG_INVALID"),
    ):
        with pytest.raises(p.ProfileInvalid) as exc:
            p.validate_profile(
                profile(planner=bad), tools=TOOLS, endpoints=[] if not cause else ["local"]
            )
        assert exc.value.code == p.PLANNER_INVALID
        assert exc.value.extra["cause"] == (cause or "PLANNER_ENDPOINT_UNKNOWN")
