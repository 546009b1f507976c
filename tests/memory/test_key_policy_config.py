"""The key whitelist is configuration (``settings.AGENTCONSOLE_MEMORY_KEYS``), but no configuration
can admit an instruction-like key, and every key needs a retention: the whitelist is refused when
it is built (``agentconsole.wiring.memory_policies``, hence the tool registry), not at run time.
"""

from __future__ import annotations

import pytest

from agentconsole import wiring
from memory.domain.preferences import DEFAULT_KEYS, KeyPolicyError

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "key",
    [
        "system_instruction",
        "system_prompt",
        "prompt_prefix",
        "assistant_instructions",
        "custom_instruction",
        "auto_approve",
        "user_role",
        "tool_permissions",
        "grant_scope",
        "safety_policy",
    ],
)
def test_an_instruction_like_key_in_the_configuration_is_refused_at_build(memory_keys, key):
    memory_keys([*DEFAULT_KEYS, {"key": key, "max_length": 40}])

    with pytest.raises(KeyPolicyError, match="instruction"):
        wiring.memory_policies()
    # The registry (which builds the save_preference contract from the policies) refuses too.
    with pytest.raises(KeyPolicyError):
        wiring.registry()


@pytest.mark.parametrize("retention_days", [0, -1])
def test_a_key_without_a_retention_is_refused_at_build(memory_keys, retention_days):
    memory_keys([{**DEFAULT_KEYS[0], "retention_days": retention_days}, DEFAULT_KEYS[1]])

    with pytest.raises(KeyPolicyError, match="retention"):
        wiring.memory_policies()


@pytest.mark.parametrize(
    "config",
    [
        [DEFAULT_KEYS[0], DEFAULT_KEYS[0]],  # twice
        [{"key": "Answer-Language"}],  # not a lower_snake_case name
        [{"key": "tone", "max_length": 0}],
        [{"key": "tone", "max_length": 10_000}],
    ],
)
def test_a_malformed_whitelist_is_refused_at_build(memory_keys, config):
    memory_keys(config)

    with pytest.raises(KeyPolicyError):
        wiring.memory_policies()


def test_the_whitelist_extends_by_configuration_with_its_own_schema(memory_keys):
    memory_keys(
        [
            *DEFAULT_KEYS,
            {
                "key": "tone",
                "max_length": 12,
                "allowed": ["formal", "casual"],
                "retention_days": 30,
            },
        ]
    )

    policies = wiring.memory_policies()
    assert set(policies) == {"answer_language", "citation_style", "tone"}
    tone = policies["tone"]
    assert (tone.retention_days, tone.purposes) == (30, ("planner", "display"))
    assert tone.violation("formal") is None
    assert tone.violation("shouting")[0] == "MEMORY_VALUE_INVALID"
    assert tone.violation("x" * 13)[0] == "MEMORY_VALUE_TOO_LONG"
    # The tool's semantic check follows the configuration.
    contract = wiring.registry().get("save_preference", "1").contract
    (semantic,) = contract.semantic_checks
    assert semantic({"key": "tone", "value": "casual"}, None) is None
    assert semantic({"key": "mood", "value": "casual"}, None)[0] == "MEMORY_KEY_NOT_ALLOWED"


def test_the_default_whitelist_is_the_seeds():
    wiring.memory_policies.cache_clear()
    try:
        assert set(wiring.memory_policies()) == {"answer_language", "citation_style"}
    finally:
        wiring.memory_policies.cache_clear()
