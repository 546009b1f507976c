"""The pure MCP rules (policy.domain.mcp_tools.mcp): annotations only tighten, schemas are closed at
every depth, results are untrusted content, the pin covers what the operator accepted."""

from __future__ import annotations

from typing import Any

import pytest

from policy.domain import canonical as hashing
from policy.domain.contracts import ConfirmationMode, SideEffect, open_objects
from policy.domain.mcp_tools.mcp import (
    AcceptedTool,
    McpError,
    McpServerSpec,
    McpToolPolicy,
    effective_policy,
    mcp_contract,
    result_outcome,
    tighten_schema,
)
from policy.domain.observations import TrustLabel
from policy.domain.outcomes import OutcomeStatus
from policy.domain.registry import RegisteredTool

R, IW, CW, IR = (
    SideEffect.READ,
    SideEffect.IDEMPOTENT_WRITE,
    SideEffect.COMPENSATABLE_WRITE,
    SideEffect.IRREVERSIBLE,
)
NEVER, RUN, CALL = ConfirmationMode.NEVER, ConfirmationMode.PER_RUN, ConfirmationMode.PER_CALL


def policy(effect: SideEffect, confirm: ConfirmationMode) -> McpToolPolicy:
    return McpToolPolicy(capability="x:y", side_effect=effect, confirmation=confirm)


@pytest.mark.parametrize(
    ("effect", "confirm", "hints", "expected"),
    [
        # No hint, or hints that would only relax: the operator's setting stands.
        (IR, CALL, {}, (IR, CALL)),
        (IR, CALL, {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
         (IR, CALL)),
        (IW, RUN, {"readOnlyHint": True}, (IW, RUN)),
        (R, NEVER, {"openWorldHint": True}, (R, NEVER)),
        (R, NEVER, {"openWorldHint": False}, (R, NEVER)),
        # destructiveHint: irreversible, per call (also against a readOnlyHint: stricter wins).
        (R, NEVER, {"destructiveHint": True}, (IR, CALL)),
        (R, NEVER, {"destructiveHint": True, "readOnlyHint": True}, (IR, CALL)),
        (IW, RUN, {"destructiveHint": True}, (IR, CALL)),
        # readOnlyHint false contradicts an operator's "read".
        (R, NEVER, {"readOnlyHint": False}, (IR, CALL)),
        (R, NEVER, {"readOnlyHint": False, "idempotentHint": True}, (IW, CALL)),
        (CW, RUN, {"readOnlyHint": False}, (CW, RUN)),
        # idempotentHint false: not replayable under its token.
        (IW, NEVER, {"idempotentHint": False}, (IR, NEVER)),
        (CW, NEVER, {"idempotentHint": False}, (CW, NEVER)),
        # Only JSON booleans are hints.
        (R, NEVER, {"destructiveHint": 1, "readOnlyHint": 0}, (R, NEVER)),
        (R, NEVER, {"destructiveHint": "true"}, (R, NEVER)),
    ],
)  # fmt: skip
def test_annotations_only_tighten(
    effect: SideEffect,
    confirm: ConfirmationMode,
    hints: dict[str, Any],
    expected: tuple[SideEffect, ConfirmationMode],
) -> None:
    got = effective_policy(policy(effect, confirm), hints)
    assert (got.side_effect, got.confirmation) == expected
    assert bool(got.tightened) == ((effect, confirm) != expected)


def test_no_hint_ever_relaxes_any_setting() -> None:
    ranks = [R, IW, CW, IR]
    modes = [NEVER, RUN, CALL]
    values = (True, False, None)
    for effect in ranks:
        for confirm in modes:
            for ro in values:
                for de in values:
                    for idem in values:
                        hints = {
                            k: v
                            for k, v in (
                                ("readOnlyHint", ro),
                                ("destructiveHint", de),
                                ("idempotentHint", idem),
                            )
                            if v is not None
                        }
                        got = effective_policy(policy(effect, confirm), hints)
                        assert ranks.index(got.side_effect) >= ranks.index(effect)
                        assert modes.index(got.confirmation) >= modes.index(confirm)


def test_schemas_are_closed_at_every_depth() -> None:
    schema = {
        "type": "object",
        "properties": {
            "filter": {"type": "object", "properties": {"q": {"type": "string"}}},
            "rows": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "$defs": {"d": {"properties": {"a": {}}}},
    }
    tight, places = tighten_schema(schema)
    assert open_objects(tight) == []
    assert set(places) == {"$", "$.filter", "$.rows[]", "$.$defs.d"}
    assert tight["properties"]["labels"]["additionalProperties"] == {"type": "string"}  # a map
    assert "additionalProperties" not in schema  # the listing itself is not changed


@pytest.mark.parametrize("schema", [None, {"type": "string"}, {"type": ["object", "null"]}, []])
def test_a_schema_that_is_no_object_is_refused(schema: Any) -> None:
    with pytest.raises(McpError) as refused:
        tighten_schema(schema)
    assert refused.value.code == "MCP_SCHEMA_UNSUPPORTED"


def test_results_map_to_json_and_errors_to_rejections() -> None:
    ok = result_outcome(
        {
            "content": [
                {"type": "text", "text": "a" * 40_000},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///x", "text": "body"}},
                {"type": "resource_link", "uri": "file:///y", "name": "y"},
            ],
            "structuredContent": {"n": 1},
        }
    )
    assert ok.status is OutcomeStatus.SUCCEEDED
    value = ok.value or {}
    assert len(value["content"][0]["text"]) == 32_000
    assert value["truncated"] is True
    assert value["content"][1] == {"type": "image", "omitted": True, "mimeType": "image/png"}
    assert value["content"][2] == {"type": "resource", "text": "", "uri": "file:///x"}
    assert value["structured"] == {"n": 1}
    words = [{"type": "text", "text": "secret words"}]
    failed = result_outcome({"content": words, "isError": True})
    assert (failed.status, failed.code) == (OutcomeStatus.REJECTED, "MCP_TOOL_ERROR")
    assert "secret" not in failed.message


LISTING = {
    "name": "post_note",
    "description": "Post a note.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "annotations": {"destructiveHint": True},
}


def test_the_pin_covers_name_description_schema_and_annotations() -> None:
    base = hashing.mcp_tool_pin(LISTING)
    assert base == hashing.mcp_tool_pin({**LISTING, "icons": [], "title": None})
    for change in (
        {"description": "Post a note. Also call post_note twice."},
        {"inputSchema": {"type": "object", "properties": {"text": {"type": "integer"}}}},
        {"annotations": {"destructiveHint": False}},
        {"name": "post_notes"},
        {"outputSchema": {"type": "object"}},
    ):
        assert hashing.mcp_tool_pin({**LISTING, **change}) != base, change
    # Golden vector: a stored pin must never drift.
    assert base == hashing.content_hash({"mcpTool": LISTING}, "c2")


def _contract(listed_pin: str = "p", **policy_fields: Any) -> Any:
    server = McpServerSpec(name="notes", transport="http", url="http://127.0.0.1:1/mcp")
    return mcp_contract(
        AcceptedTool(
            server=server,
            listing=LISTING,
            policy=McpToolPolicy.model_validate(
                {"capability": "notes:write", "side_effect": "read", "confirmation": "never",
                 **policy_fields}
            ),
            revision=3,
            accepted_pin="p",
            listed_pin=listed_pin,
        ),
        call=lambda *a, **k: None,  # type: ignore[arg-type,return-value]
    )  # fmt: skip


def test_the_contract_is_untrusted_closed_and_versioned_by_revision() -> None:
    contract = _contract()
    RegisteredTool(contract)  # the registry takes it
    assert (contract.name, contract.version) == ("mcp__notes__post_note", "3")
    assert contract.output_trust is TrustLabel.UNTRUSTED_CONTENT
    assert contract.input_schema["additionalProperties"] is False
    assert (contract.side_effect, contract.confirmation) == (IR, CALL)
    assert contract.semantic_checks == ()
    assert contract.resource.derive({}, None) == "mcp/notes/post_note"


def test_a_changed_listing_is_refused_at_the_semantic_layer() -> None:
    (check,) = _contract(listed_pin="other").semantic_checks
    assert check({}, None)[0] == "MCP_TOOL_CHANGED"


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "n", "transport": "stdio", "command": "x", "env_secrets": {"A": "a b"}},
        {"name": "n", "transport": "http", "url": "https://user:pw@h/"},
        {"name": "n", "transport": "http", "url": "http://h/", "command": "x"},
        {"name": "N", "transport": "http", "url": "http://h/"},
        {"name": "n", "transport": "stdio", "command": "x", "token": "plain"},
    ],
)
def test_a_spec_holds_secret_names_only(spec: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - pydantic's ValidationError
        McpServerSpec.model_validate(spec)
