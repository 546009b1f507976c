"""MCP tests: real servers written with the official SDK (see mcp_kit)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole import wiring
from tests.mcp.mcp_kit import (
    HOSTILE_CASES,
    TIMEOUT_MS,
    TOKEN,
    NotesServer,
    hostile_argv,
    http_server,
    stdio_server,
)


@pytest.fixture(autouse=True)
def inline_calls(settings: Any) -> None:
    """These tests drive runs in this process, with no gateway: the worker makes the MCP call
    (``AGENTCONSOLE_MODEL_CALLS=inline``). tests/mcp/test_mcp_gateway.py has the gateway's."""
    settings.AGENTCONSOLE_MODEL_CALLS = "inline"


@pytest.fixture
def mcp_secrets(settings: pytest.FixtureRequest) -> None:
    settings.AGENTCONSOLE_MCP_SECRETS = {"NOTES_TOKEN": TOKEN}  # type: ignore[attr-defined]
    # No command line is allowed until a fixture starts a stdio server (``allow``).
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = ()  # type: ignore[attr-defined]
    settings.AGENTCONSOLE_MCP_LIST_TIMEOUT_S = TIMEOUT_MS / 1000  # type: ignore[attr-defined]


@pytest.fixture
def allow_hostile(mcp_secrets: None, settings: Any) -> None:
    """The deployment allows the hostile server's command lines (tests/mcp/hostile_server.py)."""
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = tuple(tuple(hostile_argv(c)) for c in HOSTILE_CASES)


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    wiring.registry.cache_clear()
    yield
    wiring.registry.cache_clear()


@pytest.fixture(params=["stdio", "http"])
def notes(
    request: pytest.FixtureRequest, tmp_path: Path, mcp_secrets: None, settings: Any
) -> Iterator[NotesServer]:
    if request.param == "stdio":
        yield allow(settings, stdio_server(tmp_path))
    else:
        yield from http_server(tmp_path)


@pytest.fixture
def stdio_notes(tmp_path: Path, mcp_secrets: None, settings: Any) -> NotesServer:
    return allow(settings, stdio_server(tmp_path))


@pytest.fixture
def plain_stdio_notes(tmp_path: Path, mcp_secrets: None, settings: Any) -> NotesServer:
    """A stdio server started the plain way (``python notes_server.py ...``), not forked from
    the fork server (tests/mcp/forkserver.py)."""
    return allow(settings, stdio_server(tmp_path, forked=False))


def allow(settings: Any, server: NotesServer) -> NotesServer:
    """The deployment allows exactly this test server's command line (the interpreter, the
    server script and its arguments)."""
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = (tuple(server.argv),)
    return server
