"""The MCP tools page as an operator uses it: a registered server's tools arrive unaccepted, one is
accepted with a policy through the page's form, and after the server changes that tool the page
says so (refused until accepted again)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.browser_kit import PHONE, Console, layout_problems, login, shot
from tests.browser.csp_watch import settle
from tests.mcp.mcp_kit import stdio_server

pytestmark = pytest.mark.browser


def _row(section: Any, tool: str) -> Any:
    """The block of ``tool`` in a server's section (the inner locator is the page's: a
    ``has`` filter is relative to the row it filters)."""
    return section.locator("li.tool-item", has=section.page.locator("span.mono", has_text=tool))


def test_operator_accepts_a_tool_and_sees_it_change(
    new_page: Callable[..., Any], console: Console, tmp_path: Path
) -> None:
    # The folder the console's allowlist names (tests/browser/conftest.py).
    assert console.scratch is not None
    (console.scratch / "mcp").mkdir(exist_ok=True)
    notes = stdio_server(console.scratch / "mcp", name="notesbrowser")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(notes.spec))
    console.manage("mcp", "register", str(spec))

    page = new_page()
    login(page, "operator")
    page.goto("/tools/")
    section = page.locator("section", has=page.locator("h2", has_text="notesbrowser"))
    lookup = _row(section, "lookup")
    assert lookup.locator(".badge").inner_text() == "new"
    post_note = _row(section, "post_note")
    assert post_note.locator(".badge").inner_text() == "new"
    assert "server says destructive" in post_note.locator("summary").inner_text()
    # Nothing is chosen for the operator: a new tool's side effect is theirs to name, and it is
    # confirmed on every call unless they say otherwise.
    assert post_note.get_by_label("Side effect").input_value() == ""
    assert post_note.get_by_label("Confirmation").input_value() == "per-call"
    shot(page, "mcp-tools-new", full_page=True)

    lookup.get_by_label("Capability").fill("notes:read")
    lookup.get_by_label("Side effect").select_option("read")
    lookup.get_by_label("Confirmation").select_option("never")
    lookup.get_by_role("button", name="Accept").click()
    settle(page)
    lookup = _row(section, "lookup")
    assert lookup.locator(".badge").inner_text() == "pinned"
    assert "accepted by operator" in lookup.inner_text()
    assert "runs as read, confirmation never" in lookup.inner_text()

    # The server now lists lookup with another input schema: refused until accepted again.
    notes.variant.write_text("2")
    console.manage("mcp", "refresh", "notesbrowser")
    page.reload()
    lookup = _row(section, "lookup")
    assert lookup.locator(".badge").inner_text() == "changed"
    assert "Every call is refused until the listing shown is accepted" in lookup.inner_text()
    assert lookup.get_by_role("button", name="Accept").is_visible()
    shot(page, "mcp-tools-changed", full_page=True)
    assert layout_problems(page) == []

    phone = new_page(PHONE)
    login(phone, "operator")
    phone.goto("/tools/")
    shot(phone, "mcp-tools-changed", full_page=True)
    assert layout_problems(phone) == []
