"""The MCP tools page (/tools/, operators): servers and tools with their pinned/changed state,
and the Accept form posting the pin the page showed.

Personas: ``operator`` (group operator) sees and accepts; ``alice`` (group user) gets a 404."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from agentconsole import wiring
from policy.mcp import services
from policy.models import McpServer, McpTool
from tests.mcp.mcp_kit import TIMEOUT_MS, stdio_server
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def notes(tmp_path: Path, settings: Any) -> str:
    settings.AGENTCONSOLE_MCP_SECRETS = {"NOTES_TOKEN": "t"}
    settings.AGENTCONSOLE_MCP_LIST_TIMEOUT_S = TIMEOUT_MS / 1000
    wiring.registry.cache_clear()
    server = stdio_server(tmp_path)
    spec = server.spec
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = (tuple(server.argv),)
    services.mcp_server_register(
        spec=spec, by=None, lister=wiring.mcp_lister, allowed_commands=[server.argv]
    )
    return str(spec["name"])


def client_for(name: str, *roles: str) -> Client:
    client = Client()
    client.force_login(make_user(name, *roles))
    return client


def test_operators_see_tools_and_accept_the_pin_shown(notes: str) -> None:
    operator = client_for("operator", "operator")
    page = operator.get("/tools/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "post_note" in html
    assert "Accept" in html
    pin = McpTool.objects.get(name="lookup").listed_pin
    assert pin in html  # the form posts the pin the page showed

    form = {"capability": "notes:read", "side_effect": "read", "confirmation": "never",
            "timeout_ms": "5000"}  # fmt: skip
    stale = operator.post(f"/tools/{notes}/lookup/accept/", {**form, "listed_pin": "0" * 64})
    assert stale.status_code == 409
    assert "MCP_TOOL_CHANGED" in stale.content.decode()
    bad = operator.post(f"/tools/{notes}/lookup/accept/", {**form, "listed_pin": pin,
                                                          "side_effect": "teleport"})  # fmt: skip
    assert bad.status_code == 400
    assert not McpTool.objects.exclude(accepted_pin="").exists()

    done = operator.post(f"/tools/{notes}/lookup/accept/", {**form, "listed_pin": pin})
    assert done.status_code == 302
    row = McpTool.objects.get(name="lookup")
    assert (row.accepted_pin, row.revision, row.accepted_by.username) == (pin, 1, "operator")
    assert "pinned" in operator.get("/tools/").content.decode()
    assert (
        operator.post(f"/tools/{notes}/nope/accept/", {**form, "listed_pin": pin}).status_code
        == 404
    )


def test_others_do_not_see_the_page(notes: str) -> None:
    alice = client_for("alice", "user")
    assert alice.get("/tools/").status_code == 404
    assert alice.post(f"/tools/{notes}/lookup/accept/", {}).status_code == 404


def test_a_stdio_server_shows_its_whole_command_line(notes: str) -> None:
    """issue 21 item 13: the allowlist names whole command lines, so the page shows one as the
    setting writes it (the executable alone would not say what runs)."""
    spec = McpServer.objects.get(name=notes).spec
    html = client_for("operator", "operator").get("/tools/").content.decode()
    argv = json.dumps([spec["command"], *spec["args"]], ensure_ascii=False)
    assert len(spec["args"]) > 1
    assert escape(argv) in html
