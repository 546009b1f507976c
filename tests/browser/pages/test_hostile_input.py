"""issue 21 items 8 and 9 in the browser: hostile JSON in a profile's fields is refused in words
on the form (it was a 500 page on PostgreSQL), and the MCP tools page shows what a hostile
server listed, escaped, with the tools it refused left out and a stored bad name flagged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runs.demo.demo_profiles import DEMO_PROFILES
from tests.browser import browser_kit as kit
from tests.browser.browser_kit import Console, login, shot
from tests.mcp.mcp_kit import hostile_stdio

pytestmark = pytest.mark.browser


def test_a_profile_with_nan_in_its_planner_outputs_is_refused_on_the_form(
    new_page: Callable[..., Any],
) -> None:
    page = new_page()
    login(page, "operator")
    page.goto("/profiles/")
    page.get_by_label("Name", exact=True).fill("not-a-number")
    page.get_by_label("search_public").check()
    outputs = json.dumps(DEMO_PROFILES[0]["planner"]["outputs"])
    page.get_by_label("Planner outputs").fill(outputs.replace('"retry quarantine queue"', "NaN"))
    page.get_by_role("button", name="Create profile").click()
    page.wait_for_load_state()
    alert = page.locator("[role=alert]").first.inner_text()
    assert "FORM_INVALID" in alert
    assert "Planner outputs" in alert
    assert "NaN is not a JSON number" in alert
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "profiles-nan-refused", full_page=True)


def test_the_tools_page_shows_a_hostile_servers_tools_escaped(
    new_page: Callable[..., Any], console: Console, tmp_path: Path
) -> None:
    spec = tmp_path / "hostile.json"
    spec.write_text(json.dumps(hostile_stdio("names", name="hostilebrowser")))
    shown = console.manage("mcp", "register", str(spec))
    assert "refused a/b</x>: MCP_TOOL_NAME_UNSUPPORTED" in shown
    # A row as a deployment before the name check left it.
    console.shell(
        "from policy.models import McpServer, McpTool; "
        "s = McpServer.objects.get(name='hostilebrowser'); "
        "McpTool.objects.create(server=s, name='a/b</x>', listed_pin='0' * 64, "
        "listing={'name': 'a/b</x>', 'description': '<script>alert(1)</script>', "
        "'inputSchema': {'type': 'object'}})"
    )  # fmt: skip
    page = new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    login(page, "operator")
    page.goto("/tools/")
    section = page.locator("section", has=page.locator("h2", has_text="hostilebrowser"))
    names = section.locator("span.tool-name").all_inner_texts()
    assert sorted(names) == ["a/b</x>", "fine", "nul_text", "twin_keys"]
    bad = section.locator("li.tool-item", has=page.locator("span.tool-name", has_text="a/b"))
    assert "This name is not an MCP tool name" in bad.inner_text()
    assert bad.get_by_role("button", name="Accept").count() == 0
    assert "<script>alert(1)</script>" in bad.inner_text()  # shown as text, never run
    assert dialogs == []
    assert kit.layout_problems(page) == []
    shot(page, "mcp-tools-hostile", full_page=True)
