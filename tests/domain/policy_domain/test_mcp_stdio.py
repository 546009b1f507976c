"""The stdio MCP allowlist names whole command lines (issue 21 item 13): allowing an
interpreter with one script allows neither another script nor another argument, an
executable is compared as written (no path or symlink spelling reaches it), and the
environment a spec sets cannot change which code runs."""

from __future__ import annotations

from typing import Any

import pytest

from policy.domain.mcp_tools.mcp_stdio import AllowlistInvalid, parse_allowlist, stdio_refusal

PYTHON = "/usr/bin/python3"
SERVER = "/opt/mcp/notes_server.py"
ALLOWED = parse_allowlist([[PYTHON, SERVER, "--board", "team"], ["/usr/local/bin/notes-mcp"]])


def refusal(argv: list[str], env: dict[str, str] | None = None) -> str | None:
    return stdio_refusal(argv[0], argv[1:], env or {}, ALLOWED)


def test_the_exact_command_lines_are_allowed() -> None:
    assert refusal([PYTHON, SERVER, "--board", "team"]) is None
    assert refusal(["/usr/local/bin/notes-mcp"], {"NOTES_TOKEN": "NOTES_TOKEN"}) is None


@pytest.mark.parametrize(
    "argv",
    [
        [PYTHON, "/home/op/evil.py"],  # the allowed interpreter, another script
        [PYTHON, "-c", "import os; os.system('id')"],
        [PYTHON],  # an interactive interpreter reading its stdin
        [PYTHON, SERVER, "--board", "team", "--exec", "id"],  # an argument added
        [PYTHON, SERVER, "--board"],  # one left out
        [PYTHON, SERVER, "--board", "other"],  # one changed
        [PYTHON, "--board", "team", SERVER],  # reordered
        ["/usr/local/bin/notes-mcp", "--debug"],
        # Other spellings of the same file: compared as written, never resolved.
        ["/usr/bin/../bin/python3", SERVER, "--board", "team"],
        ["/usr//bin/python3", SERVER, "--board", "team"],
        ["/usr/bin/./python3", SERVER, "--board", "team"],
        ["/home/op/link-to-python3", SERVER, "--board", "team"],
        ["python3", SERVER, "--board", "team"],  # looked up on PATH
        [PYTHON, "/opt/mcp/../mcp/notes_server.py", "--board", "team"],
        [PYTHON + " ", SERVER, "--board", "team"],
    ],
)
def test_any_other_command_line_is_refused(argv: list[str]) -> None:
    assert refusal(argv) == "this command line (executable and arguments) is not in " + (
        "AGENTCONSOLE_MCP_STDIO_COMMANDS"
    )


@pytest.mark.parametrize(
    "name",
    ["LD_PRELOAD", "LD_LIBRARY_PATH", "ld_preload", "DYLD_INSERT_LIBRARIES", "PYTHONPATH",
     "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONHOME", "NODE_OPTIONS", "PATH", "HOME", "BASH_ENV",
     "ENV", "PERL5OPT", "RUBYOPT", "JAVA_TOOL_OPTIONS", "GCONV_PATH", "GLIBC_TUNABLES"],
)  # fmt: skip
def test_an_environment_that_changes_what_runs_is_refused(name: str) -> None:
    """The values are the deployment's secrets, but a name alone can load other code (a
    preload library, a module path, a flag that reads stdin as code)."""
    found = refusal([PYTHON, SERVER, "--board", "team"], {name: "NOTES_TOKEN", "T": "NOTES_TOKEN"})
    assert found == f"env_secrets may not set {name}: it changes which code runs"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["/usr/bin/python3"], "names an executable alone"),  # the old form: the way out shown
        ({"python": "/usr/bin/python3"}, "must be a JSON list of command lines"),
        ([[]], "non-empty JSON list of strings"),
        ([["/usr/bin/python3", 3]], "non-empty JSON list of strings"),
        ([["python3", "server.py"]], "absolute, normalized path"),
        ([["/usr/bin/../bin/python3"]], "absolute, normalized path"),
        ([["/usr//bin/python3"]], "absolute, normalized path"),
        ([["//usr/bin/python3"]], "absolute, normalized path"),
        ([["/usr/bin/python3/"]], "absolute, normalized path"),
    ],
)
def test_a_malformed_allowlist_stops_the_start_up(value: Any, message: str) -> None:
    with pytest.raises(AllowlistInvalid, match=message) as info:
        parse_allowlist(value)
    if isinstance(value, list) and value and isinstance(value[0], str):
        assert '["/usr/bin/python3", "/path/to/server.py"' in str(info.value).replace("'", '"')


def test_an_entry_in_the_old_form_allows_nothing_when_set_directly() -> None:
    """Settings overridden in code skip the parse: a string is still no argv."""
    assert stdio_refusal("/x", (), {}, ["/x"]) is not None
    assert stdio_refusal("/x", (), {}, [["/x"]]) is None
