"""A deployment whose stdio allowlist still names executables alone does not start (issue 21
item 13): the settings refuse it with the way out, in a fresh process as at a real start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage_check(allowlist: object, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCONSOLE_MCP_STDIO")}
    env.update(
        AGENTCONSOLE_MCP_STDIO_COMMANDS=json.dumps(allowlist),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PYTHONPATH=str(ROOT),
    )
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_an_executable_alone_stops_the_start_up_with_the_way_out(tmp_path: Path) -> None:
    result = manage_check(["/usr/bin/python3"], tmp_path)
    assert result.returncode != 0
    assert "'/usr/bin/python3' names an executable alone" in result.stderr
    assert "Each entry is now a whole command line" in result.stderr


@pytest.mark.parametrize("allowlist", [[["/usr/bin/python3", "/opt/mcp/notes.py"]], []])
def test_whole_command_lines_start(allowlist: object, tmp_path: Path) -> None:
    result = manage_check(allowlist, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
