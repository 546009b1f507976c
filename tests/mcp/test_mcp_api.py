"""The MCP catalog API (operators only): every bad input is a 4xx ``{code, message, extra}``.

Personas (tests/support/personas.py): ``operator`` manages MCP servers; ``alice`` (a user)
and the anonymous client may not."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from agentconsole import wiring
from policy.models import McpServer, McpTool
from tests.mcp.mcp_kit import READ_POLICY, TOKEN, NotesServer, stdio_server
from tests.support.personas import Persona, make_persona

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_registry")]

SERVERS = "/api/mcp/servers/"


@pytest.fixture
def operator() -> Persona:
    return make_persona("operator", roles=("operator",))


def error(response: Any, status: int, code: str) -> dict[str, Any]:
    body = response.json()
    assert response.status_code == status, body
    assert set(body) == {"code", "message", "extra"}, body
    assert body["code"] == code, body
    return body


def test_only_operators_manage_servers() -> None:
    alice = make_persona("alice", roles=("user",))
    error(alice.get(SERVERS), 403, "PERMISSION_DENIED")
    error(alice.post(SERVERS, {"name": "x", "transport": "stdio"}), 403, "PERMISSION_DENIED")
    anonymous = make_persona("anon", token=False)
    anonymous.client.credentials()
    assert anonymous.get(SERVERS).status_code == 401


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ([], "VALIDATION_ERROR"),
        ({"name": "x", "transport": "ftp"}, "VALIDATION_ERROR"),
        ({"name": "x", "transport": "stdio", "command": "x", "extra": 1}, "VALIDATION_ERROR"),
        ({"name": "x", "transport": "stdio", "args": "not-a-list", "command": "x"},
         "VALIDATION_ERROR"),
        ({"name": "Bad Name", "transport": "stdio", "command": "x"}, "MCP_SERVER_INVALID"),
        ({"name": "x", "transport": "stdio"}, "MCP_SERVER_INVALID"),
        ({"name": "x", "transport": "stdio", "command": "x", "url": "http://h/"},
         "MCP_SERVER_INVALID"),
        ({"name": "x", "transport": "http", "url": "ftp://h/"}, "MCP_SERVER_INVALID"),
        ({"name": "x", "transport": "http", "url": "http://u:pw@h/"}, "MCP_SERVER_INVALID"),
        ({"name": "x", "transport": "http", "url": "http://h/",
          "header_secrets": {"Bad Header": "S"}}, "MCP_SERVER_INVALID"),
        ({"name": "x", "transport": "stdio", "command": "x", "env_secrets": {"A": "not a name"}},
         "MCP_SERVER_INVALID"),
    ],
)  # fmt: skip
def test_a_bad_server_spec_is_a_400_and_writes_nothing(
    operator: Persona, body: Any, code: str
) -> None:
    body = error(operator.post(SERVERS, body), 400, code)
    assert "pw" not in str(body["extra"])  # a refused value is never echoed
    assert not McpServer.objects.exists()


def test_an_unreachable_server_is_a_424_and_writes_nothing(
    operator: Persona, settings: Any
) -> None:
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = [["/nonexistent/mcp-server"]]
    spec = {"name": "gone", "transport": "stdio", "command": "/nonexistent/mcp-server"}
    error(operator.post(SERVERS, spec), 424, "MCP_SERVER_UNAVAILABLE")
    spec = {"name": "gone", "transport": "http", "url": "http://127.0.0.1:9/mcp"}
    error(operator.post(SERVERS, spec), 424, "MCP_SERVER_UNAVAILABLE")
    assert not McpServer.objects.exists()


def test_only_the_deployments_commands_may_be_started(operator: Persona, settings: Any) -> None:
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = [["/usr/bin/allowed"]]
    spec = {"name": "x", "transport": "stdio", "command": "/bin/sh", "args": ["-c", "id"]}
    error(operator.post(SERVERS, spec), 400, "MCP_COMMAND_NOT_ALLOWED")
    assert not McpServer.objects.exists()


def test_a_missing_secret_is_named(operator: Persona, settings: Any) -> None:
    settings.AGENTCONSOLE_MCP_SECRETS = {}
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = [["x"]]
    spec = {"name": "x", "transport": "stdio", "command": "x", "env_secrets": {"T": "NOPE"}}
    body = error(operator.post(SERVERS, spec), 400, "MCP_SECRET_MISSING")
    assert body["extra"]["names"] == ["NOPE"]


def test_register_list_and_accept(operator: Persona, stdio_notes: NotesServer) -> None:
    created = operator.post(SERVERS, stdio_notes.spec)
    assert created.status_code == 201, created.json()
    tools = {t["name"]: t for t in created.json()["tools"]}
    assert set(tools) == {"lookup", "post_note", "whoami", "fail", "slow", "nap", "slow_post"}
    assert {t["state"] for t in tools.values()} == {"new"}
    # The schema the contract would get is closed at every depth.
    assert tools["lookup"]["input_schema"]["additionalProperties"] is False
    error(operator.post(SERVERS, stdio_notes.spec), 409, "MCP_SERVER_EXISTS")

    accept = f"{SERVERS}notes/tools/post_note/accept/"
    pin = tools["post_note"]["listed_pin"]
    error(operator.post(accept, {"listed_pin": "0" * 64, "policy": READ_POLICY}), 409,
          "MCP_TOOL_CHANGED")  # fmt: skip
    error(operator.post(accept, {"listed_pin": "nope", "policy": READ_POLICY}), 400,
          "VALIDATION_ERROR")  # fmt: skip
    error(operator.post(accept, {"listed_pin": pin, "policy": {"capability": "x"}}), 400,
          "MCP_POLICY_INVALID")  # fmt: skip
    bad_field = {**READ_POLICY, "resource": {"kind": "argument", "field": "nope"}}
    error(operator.post(accept, {"listed_pin": pin, "policy": bad_field}), 400,
          "MCP_POLICY_INVALID")  # fmt: skip
    error(operator.post(f"{SERVERS}notes/tools/nope/accept/",
                        {"listed_pin": pin, "policy": READ_POLICY}), 404, "NOT_FOUND")  # fmt: skip
    error(operator.get(f"{SERVERS}nope/"), 404, "NOT_FOUND")
    assert not McpTool.objects.exclude(accepted_pin="").exists()

    accepted = operator.post(accept, {"listed_pin": pin, "policy": READ_POLICY})
    assert accepted.status_code == 200, accepted.json()
    post_note = {t["name"]: t for t in accepted.json()["tools"]}["post_note"]
    assert (post_note["state"], post_note["version"]) == ("accepted", "1")
    # The operator said read/never; the server's hints (readOnlyHint false, destructiveHint)
    # make it irreversible and confirmed per call, and say so.
    assert post_note["effective"]["side_effect"] == "irreversible"
    assert post_note["effective"]["confirmation"] == "per-call"
    assert post_note["effective"]["tightened_by_annotations"]
    assert post_note["accepted_by"] == "operator"

    off = operator.post(f"{SERVERS}notes/enabled/", {"enabled": False})
    assert off.json()["enabled"] is False
    error(operator.post(f"{SERVERS}notes/enabled/", {"enabled": "no"}), 400, "VALIDATION_ERROR")


# ---- issue 21 item 13: the allowlist names whole command lines ---------------------------------


def test_an_allowed_interpreter_starts_no_other_command_line(
    operator: Persona, settings: Any, tmp_path: Path
) -> None:
    """The deployment allows this interpreter running the notes server with its arguments. The
    same interpreter with another script, ``-c``, or one argument more is refused, and nothing
    is started: the marker a started program would write never appears."""
    notes = stdio_server(tmp_path)
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = (tuple(notes.argv),)
    settings.AGENTCONSOLE_MCP_SECRETS = {"NOTES_TOKEN": TOKEN}
    marker = tmp_path / "started"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').close()\n")
    for args in (
        [str(evil)],
        ["-c", f"open({str(marker)!r}, 'w').close()"],
        [*notes.spec["args"], "--unexpected"],
        [str(evil), *notes.spec["args"]],
    ):
        body = error(
            operator.post(SERVERS, {**notes.spec, "args": args}), 400, "MCP_COMMAND_NOT_ALLOWED"
        )
        assert "not in AGENTCONSOLE_MCP_STDIO_COMMANDS" in body["message"]
    # The allowed executable under another name: a symlink to it, a path through "..".
    link = tmp_path / "python-link"
    link.symlink_to(sys.executable)
    exe = Path(sys.executable)
    for command in (str(link), f"{exe.parent}/../{exe.parent.name}/{exe.name}"):
        spec = {**notes.spec, "command": command}
        error(operator.post(SERVERS, spec), 400, "MCP_COMMAND_NOT_ALLOWED")
    assert not marker.exists()
    assert not McpServer.objects.exists()


def test_an_environment_that_loads_other_code_is_refused(
    operator: Persona, settings: Any, tmp_path: Path
) -> None:
    """The allowed command line, with ``PYTHONPATH`` set from a secret whose value is a folder
    holding a ``sitecustomize.py``: the interpreter would run it before the server."""
    notes = stdio_server(tmp_path)
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = (tuple(notes.argv),)
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "started"
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    settings.AGENTCONSOLE_MCP_SECRETS = {"NOTES_TOKEN": TOKEN, "PLUGINS": str(site)}
    spec = {**notes.spec, "env_secrets": {"NOTES_TOKEN": "NOTES_TOKEN", "PYTHONPATH": "PLUGINS"}}
    body = error(operator.post(SERVERS, spec), 400, "MCP_COMMAND_NOT_ALLOWED")
    assert "PYTHONPATH" in body["message"]
    assert not marker.exists()
    assert not McpServer.objects.exists()


def test_a_server_allowed_by_an_executable_alone_leaves_the_registry(
    operator: Persona, stdio_notes: NotesServer, settings: Any
) -> None:
    """A server registered earlier, when its interpreter alone was on the list, is left out of
    the registry once the list names whole command lines and not its own."""
    created = operator.post(SERVERS, stdio_notes.spec)
    assert created.status_code == 201, created.json()
    pin = McpTool.objects.get(name="lookup").listed_pin
    accept = operator.post(
        f"{SERVERS}notes/tools/lookup/accept/", {"listed_pin": pin, "policy": READ_POLICY}
    )
    assert accept.status_code == 200, accept.json()
    assert "mcp__notes__lookup" in {c.name for c in wiring.registry()}

    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = [[sys.executable]]
    wiring.registry.cache_clear()
    assert "mcp__notes__lookup" not in {c.name for c in wiring.registry()}
    error(operator.post(f"{SERVERS}notes/refresh/"), 400, "MCP_COMMAND_NOT_ALLOWED")
