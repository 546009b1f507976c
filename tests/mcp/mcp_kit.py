"""The MCP test servers (``notes_server.py``, official SDK) as the tests start them: over stdio
(a process per call, started by the client) and over streamable HTTP (one server process on
127.0.0.1 and a free port, started and stopped by the fixture). Each is forked from a process
that imported the SDK once (tests/mcp/forkserver.py); ``forked=False`` starts one the plain
way."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SERVER = HERE / "notes_server.py"
HOSTILE = HERE / "hostile_server.py"  # serves hostile data
FORKSERVER, LAUNCHER = HERE / "forkserver.py", HERE / "forked.py"
TOKEN = "notes-canary-7f3a9c"  # the server's secret: must never show in a run record

# Timeouts are generous bounds: a stdio call starts a Python process that imports the SDK, on a
# machine that may be busy; no test here claims a speed.
TIMEOUT_MS = 120_000
READ_POLICY = {
    "capability": "notes:read",
    "side_effect": "read",
    "confirmation": "never",
    "timeout_ms": TIMEOUT_MS,
}
# The operator calls post_note an idempotent write that needs no confirmation; the server's
# destructiveHint makes it irreversible and confirmed per call (annotations only tighten).
WRITE_POLICY = {
    "capability": "notes:write",
    "side_effect": "idempotent-write",
    "confirmation": "never",
    "timeout_ms": TIMEOUT_MS,
}


@dataclass
class NotesServer:
    spec: dict[str, Any]
    log: Path
    variant: Path

    @property
    def argv(self) -> list[str]:
        """A stdio server's whole command line, as the deployment's allowlist names it."""
        return [self.spec["command"], *self.spec["args"]]

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [r for r in rows if tool is None or r["tool"] == tool]


_forkserver: dict[str, str] = {}
_forkserver_lock = threading.Lock()


def forkserver() -> str:
    """The Unix socket of this test process's fork server (tests/mcp/forkserver.py), started
    at the first call; stopped when this process exits."""
    with _forkserver_lock:
        if "address" not in _forkserver:
            _forkserver["address"] = _start_forkserver()
    return _forkserver["address"]


def _start_forkserver() -> str:
    folder = tempfile.mkdtemp(prefix="mcpfork-")
    address = os.path.join(folder, "s")
    proc = subprocess.Popen(
        [sys.executable, str(FORKSERVER), address],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()  # "ready" once it listens, or nothing if it failed
    proc.stdout.close()
    if ready.strip() != "ready":
        _stop(proc)
        raise RuntimeError(f"the MCP fork server did not start (exit {proc.returncode})")
    atexit.register(_stop, proc, folder)
    return address


def _stop(proc: subprocess.Popen[Any], folder: str | None = None) -> None:
    """SIGTERM, ten seconds to exit, then SIGKILL; the fork server's folder removed."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def server_command(script: Path, *args: str, forked: bool = True) -> list[str]:
    """``python SCRIPT ARGS...``, through the fork server's launcher unless ``forked=False``."""
    if forked:
        return [sys.executable, str(LAUNCHER), forkserver(), str(script), *args]
    return [sys.executable, str(script), *args]


def stdio_server(tmp: Path, name: str = "notes", forked: bool = True) -> NotesServer:
    log, variant = tmp / "calls.jsonl", tmp / "variant.txt"
    command, *args = server_command(
        SERVER, "--log", str(log), "--variant", str(variant), forked=forked
    )
    spec = {
        "name": name,
        "transport": "stdio",
        "command": command,
        "args": args,
        "env_secrets": {"NOTES_TOKEN": "NOTES_TOKEN"},
    }
    return NotesServer(spec, log, variant)


def _free_port() -> int:
    # The port is free when asked; another process could take it before the server binds
    # (then the server fails to start and the fixture says so).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the MCP HTTP server exited at start")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)  # waiting for a real process to listen, not for time to pass
    raise RuntimeError("the MCP HTTP server did not listen in time")


def http_server(tmp: Path, name: str = "notesweb") -> Iterator[NotesServer]:
    log, variant = tmp / "calls.jsonl", tmp / "variant.txt"
    for spec in _served(server_command(SERVER, "--log", str(log), "--variant", str(variant)), name):
        yield NotesServer(spec, log, variant)


HOSTILE_CASES = ("names", "duplicate-key", "nan", "lone-surrogate")


def hostile_argv(case: str) -> list[str]:
    """The whole command line of ``hostile_server.py --case <case>`` over stdio (what a
    deployment's ``AGENTCONSOLE_MCP_STDIO_COMMANDS`` must name for it to start)."""
    return server_command(HOSTILE, "--case", case)


def hostile_stdio(case: str, name: str = "hostile") -> dict[str, Any]:
    """The spec of ``hostile_server.py --case <case>`` over stdio."""
    command, *args = hostile_argv(case)
    return {"name": name, "transport": "stdio", "command": command, "args": args}


def hostile_http(case: str, name: str = "hostileweb") -> Iterator[dict[str, Any]]:
    """The spec of ``hostile_server.py --case <case>`` over HTTP, while it runs."""
    yield from _served(server_command(HOSTILE, "--case", case), name)


def _served(argv: list[str], name: str) -> Iterator[dict[str, Any]]:
    """A server process listening on 127.0.0.1 while the caller holds the spec."""
    port = _free_port()
    proc = subprocess.Popen(
        [*argv, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, proc)
        yield {
            "name": name,
            "transport": "http",
            "url": f"http://127.0.0.1:{port}/mcp",
            "header_secrets": {"Authorization": "NOTES_TOKEN"},
        }
    finally:
        _stop(proc)
