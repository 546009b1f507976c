"""MCP tests: real servers written with the official SDK (see mcp_kit)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentconsole import wiring
from tests.mcp.mcp_kit import TIMEOUT_MS, TOKEN, NotesServer, http_server, stdio_server


@pytest.fixture
def mcp_secrets(settings: pytest.FixtureRequest) -> None:
    settings.AGENTCONSOLE_MCP_SECRETS = {"NOTES_TOKEN": TOKEN}  # type: ignore[attr-defined]
    # The test server runs under this interpreter; only it may be started.
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = [sys.executable]  # type: ignore[attr-defined]
    settings.AGENTCONSOLE_MCP_LIST_TIMEOUT_S = TIMEOUT_MS / 1000  # type: ignore[attr-defined]


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    wiring.registry.cache_clear()
    yield
    wiring.registry.cache_clear()


@pytest.fixture(params=["stdio", "http"])
def notes(
    request: pytest.FixtureRequest, tmp_path: Path, mcp_secrets: None
) -> Iterator[NotesServer]:
    if request.param == "stdio":
        yield stdio_server(tmp_path)
    else:
        yield from http_server(tmp_path)


@pytest.fixture
def stdio_notes(tmp_path: Path, mcp_secrets: None) -> NotesServer:
    return stdio_server(tmp_path)
