"""``manage.py mcp``: the operator's catalog from a shell (the same services as the API)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from policy.models import McpTool
from tests.mcp.mcp_kit import READ_POLICY, NotesServer, hostile_stdio

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_registry")]


def mcp(*args: str) -> str:
    out = io.StringIO()
    call_command("mcp", *args, stdout=out)
    return out.getvalue()


def test_register_list_accept(stdio_notes: NotesServer, tmp_path: Path) -> None:
    spec = tmp_path / "notes.json"
    spec.write_text(json.dumps(stdio_notes.spec))
    policy = tmp_path / "lookup.json"
    policy.write_text(json.dumps(READ_POLICY))

    shown = mcp("register", str(spec))
    assert "lookup" in shown
    assert "new" in shown
    assert "accepted lookup as version 1" in mcp("accept", "notes", "lookup", str(policy))
    assert McpTool.objects.get(name="lookup").accepted_pin
    listed = json.loads(mcp("list", "--json"))
    states = {t["name"]: t["state"] for t in listed[0]["tools"]}
    assert states["lookup"] == "accepted"
    assert states["post_note"] == "new"

    with pytest.raises(CommandError, match="MCP_TOOL_CHANGED"):
        mcp("accept", "notes", "post_note", str(policy), "--pin", "0" * 64)
    with pytest.raises(CommandError, match="NOT_FOUND"):
        mcp("refresh", "nope")
    policy.write_text("[]")
    with pytest.raises(CommandError, match="must hold a JSON object"):
        mcp("accept", "notes", "post_note", str(policy))
    # issue 21 item 8: which side effect did the operator mean? The file is refused.
    policy.write_text(json.dumps(READ_POLICY)[:-1] + ', "side_effect": "irreversible"}')
    with pytest.raises(CommandError, match="DUPLICATE_JSON_KEY"):
        mcp("accept", "notes", "post_note", str(policy))
    assert not McpTool.objects.get(name="post_note").accepted_pin
    assert "disabled" in mcp("disable", "notes")


def test_register_names_the_tools_it_refused(allow_hostile: None, tmp_path: Path) -> None:
    spec = tmp_path / "hostile.json"
    spec.write_text(json.dumps(hostile_stdio("names")))
    shown = mcp("register", str(spec))
    assert "refused a/b</x>: MCP_TOOL_NAME_UNSUPPORTED" in shown
    assert "refused nul_desc: MCP_TOOL_LISTING_INVALID (NUL_CHARACTER)" in shown
