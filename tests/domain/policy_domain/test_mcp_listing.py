"""policy.domain.mcp_tools.mcp_listing: which entries of a server's tools/list an operator is
offered, and a stable reason for each one refused (issue 21 item 9)."""

from __future__ import annotations

from typing import Any

import pytest

from policy.domain import canonical as hashing
from policy.domain.contracts import ConfirmationMode, SideEffect
from policy.domain.mcp_tools.mcp import (
    AcceptedTool,
    McpError,
    McpServerSpec,
    McpToolPolicy,
    mcp_contract,
)
from policy.domain.mcp_tools.mcp_listing import screen, tool_name_ok

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def tool(name: Any, **fields: Any) -> dict[str, Any]:
    return {"name": name, "description": "d", "inputSchema": SCHEMA, **fields}


@pytest.mark.parametrize(
    "name", ["a/b</x>", "..", ".", "", "a b", "x" * 65, "abc\n", "é", "a\x00", "\ud800", 7, None,
             ["a"], {"a": 1}],
)  # fmt: skip
def test_a_name_that_is_not_an_mcp_tool_name_is_refused(name: Any) -> None:
    screened = screen([tool(name), tool("fine")], limit=10)
    assert list(screened.tools) == ["fine"]
    (refused,) = screened.refused
    assert refused.code == "MCP_TOOL_NAME_UNSUPPORTED"
    assert refused.name.isascii()
    assert refused.name.isprintable()
    assert len(refused.name) <= 64 * 6  # every character may become an escape


def test_the_names_the_specification_allows_are_kept() -> None:
    names = ["lookup", "post_note", "a.b-c_D9", "x" * 64, "-lead", "trail."]
    assert all(tool_name_ok(n) for n in names)
    assert list(screen([tool(n) for n in names], limit=10).tools) == names


def test_a_name_listed_twice_is_refused_both_times() -> None:
    screened = screen([tool("twin", description="one"), tool("twin", description="two"),
                       tool("fine")], limit=10)  # fmt: skip
    assert list(screened.tools) == ["fine"]
    assert [(r.name, r.code) for r in screened.refused] == [("twin", "MCP_TOOL_NAME_DUPLICATE")] * 2


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (tool("nul", description="a\x00b"), "NUL_CHARACTER"),
        (tool("surrogate", description="\ud800"), "INVALID_UNICODE"),
        (tool("nan", inputSchema={**SCHEMA, "default": float("nan")}), "NON_FINITE_NUMBER"),
        (tool("deep", annotations=nested(70)), "VALUE_TOO_DEEP"),
    ],
)
def test_a_listing_no_json_column_stores_is_refused_with_the_reason(
    entry: dict[str, Any], reason: str
) -> None:
    screened = screen([entry, tool("fine")], limit=10)
    assert list(screened.tools) == ["fine"]
    (refused,) = screened.refused
    assert (refused.name, refused.code, refused.reason) == (
        entry["name"], "MCP_TOOL_LISTING_INVALID", reason
    )  # fmt: skip


def test_entries_that_are_not_objects_and_entries_past_the_limit() -> None:
    screened = screen(["a string", None, tool("one"), tool("two"), tool("three")], limit=4)
    assert list(screened.tools) == ["one", "two"]
    assert [r.code for r in screened.refused] == [
        "MCP_TOO_MANY_TOOLS", "MCP_TOOL_ENTRY_INVALID", "MCP_TOOL_ENTRY_INVALID"
    ]  # fmt: skip


def test_a_kept_entry_carries_its_pin() -> None:
    entry = tool("fine")
    assert screen([entry], limit=1).tools["fine"] == (entry, hashing.mcp_tool_pin(entry))


def test_a_contract_refuses_a_name_with_a_trailing_newline() -> None:
    """``re.match`` with ``$`` let ``"lookup\\n"`` through (``$`` matches before a final
    newline); the contract builds from the same rule as the listing."""
    accepted = AcceptedTool(
        server=McpServerSpec(name="s", transport="stdio", command="x"),
        listing=tool("lookup\n"),
        policy=McpToolPolicy(
            capability="x:y", side_effect=SideEffect.READ, confirmation=ConfirmationMode.NEVER
        ),
        revision=1,
        accepted_pin="p",
        listed_pin="p",
    )
    with pytest.raises(McpError) as refused:
        mcp_contract(accepted, call=lambda *a, **k: None)  # type: ignore[arg-type]
    assert refused.value.code == "MCP_TOOL_NAME_UNSUPPORTED"
