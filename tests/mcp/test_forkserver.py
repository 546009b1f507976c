"""The fork server the MCP test servers start from (tests/mcp/forkserver.py) behaves as the plain
start it replaces: the launcher's stdio, arguments, environment and folder reach the server; the
launcher exits as the server did; its signals reach the server; killed outright, its server goes
with it. Real processes; each wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.mcp.mcp_kit import server_command
from tests.support.procs import alive
from tests.support.workers import wait_for

SCRIPT = """
import os, signal, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("PROBE"), flush=True)
print("to stderr", file=sys.stderr, flush=True)
line = sys.stdin.readline().strip()
if line == "sleep":
    def stop(number, frame):
        print("stopped by", signal.Signals(number).name, flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, stop)
    open(sys.argv[1], "w").write(str(os.getpid()))
    signal.pause()  # until a signal ends it: no clock to outlast
sys.exit(int(line))
"""


def _launch(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "server.py"
    script.write_text(SCRIPT)
    return subprocess.Popen(
        server_command(script, *args),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "PROBE": "seen"},
        text=True,
    )


def test_the_server_gets_the_launchers_stdio_argv_env_and_folder_and_its_exit_code(
    tmp_path: Path,
) -> None:
    proc = _launch(tmp_path, "a b", "--x")
    out, err = proc.communicate("3\n", timeout=60)
    assert out == f"argv ['a b', '--x'] cwd {tmp_path} env seen\n"
    assert err == "to stderr\n"
    assert proc.returncode == 3


def _server_pid(proc: subprocess.Popen[str], pid_file: Path) -> int:
    assert proc.stdin is not None
    proc.stdin.write("sleep\n")
    proc.stdin.flush()
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout_s=60, what="the server")
    return int(pid_file.read_text())


def test_a_signal_to_the_launcher_reaches_the_server_and_the_launcher_exits_as_it_did(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"
    proc = _launch(tmp_path, str(pid_file))
    _server_pid(proc, pid_file)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert out.splitlines()[-1] == "stopped by SIGTERM"
    assert proc.returncode == 7


def test_a_server_killed_by_a_signal_kills_its_launcher_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    proc = _launch(tmp_path, str(pid_file))
    os.kill(_server_pid(proc, pid_file), signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL


def test_a_launcher_killed_outright_takes_its_server_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    proc = _launch(tmp_path, str(pid_file))
    server = _server_pid(proc, pid_file)
    proc.kill()
    assert proc.wait(60) == -signal.SIGKILL
    wait_for(lambda: not alive(server), timeout_s=30, what="the server gone")
