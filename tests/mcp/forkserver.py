"""A fork server for the MCP test servers: one process per test process that has imported the
official SDK once, and forks a server for each start.

Why: a stdio MCP server is a process per call (the client's design, docs/mcp.md), and each start
of ``notes_server.py`` imported the SDK again (its pydantic models of every protocol version):
~1.5 s of CPU each, ~70 starts a run, ~120 s of a run's ~1,400 s of CPU (process accounting,
docs/benchmarks.md). Forked from a parent that imported it, a start is a fork and the server's
own work.

What stays real: the server is the SDK's, in its own process, on the pipes (stdio) or the port
(HTTP) the client gave it; its command line is what the deployment's allowlist names. The
command is ``python forked.py ADDRESS SCRIPT ARGS...`` (tests/mcp/forked.py): a launcher with
only the standard library that hands its stdin, stdout and stderr, its arguments, environment
and folder to this server, passes on the signals it gets (the client's SIGTERM at shutdown) and
exits as the server exited. Killed outright, its connection closes and the server is killed too.
``tests/mcp/test_mcp_client.py`` still starts a server the plain way (``forked=False``). One
difference stays: a forked server ends with ``os._exit`` after flushing stdout and stderr, so
``atexit`` handlers of its script do not run (the test servers register none).

    python forkserver.py ADDRESS    # prints "ready" when it listens on the Unix socket ADDRESS

The server exits when the test process that started it is gone (its parent changed), and at
SIGTERM; the servers it forked go with it. The test process's side: ``mcp_kit.forkserver()``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# What the servers import at their top (tests/mcp/notes_server.py, hostile_server.py), and what
# the SDK imports only when a server runs: imported here once, before any fork.
PRELOAD = (
    "notes_server",
    "hostile_server",
    "anyio._backends._asyncio",
    "mcp.server.stdio",
    "mcp.server.streamable_http_manager",
    "uvicorn.main",
)
_HEADER = struct.Struct("!I")


def _read_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the launcher closed its connection mid-request")
        data += chunk
    return data


def _request(conn: socket.socket) -> tuple[list[int], dict[str, Any]]:
    """A launcher's stdin, stdout and stderr (passed as file descriptors) and its start."""
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("a launcher sent no stdio")
    try:
        (size,) = _HEADER.unpack(_read_exact(conn, _HEADER.size))
        return fds, json.loads(_read_exact(conn, size))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _run_server(fds: list[int], start: dict[str, Any]) -> int:
    """In the forked child: become ``python SCRIPT ARGS...`` on the launcher's stdio."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(start["env"])
    os.chdir(start["cwd"])
    script = start["argv"][0]
    sys.argv = list(start["argv"])
    sys.path[0] = str(Path(script).resolve().parent)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


class _Server:
    def __init__(self, address: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(address)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.wakeup_r, self.wakeup_w = os.pipe()
        os.set_blocking(self.wakeup_w, False)
        signal.set_wakeup_fd(self.wakeup_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector.register(self.wakeup_r, selectors.EVENT_READ)
        self.children: dict[int, socket.socket] = {}  # server pid -> its launcher's connection
        self.parent = os.getppid()
        self.stopping = False
        signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, *_: Any) -> None:
        self.stopping = True

    def serve(self) -> None:
        while os.getppid() == self.parent and not self.stopping:
            for key, _ in self.selector.select(timeout=1.0):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj == self.wakeup_r:
                    os.read(self.wakeup_r, 512)
                else:
                    self._launcher_gone(key.data)
            self._reap()
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(10)
        try:
            fds, start = _request(conn)
        except (OSError, ValueError) as exc:
            print(f"forkserver: a bad request: {exc}", file=sys.stderr)
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(self._child(conn, fds, start))
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        with contextlib.suppress(OSError):  # the launcher is gone already: _launcher_gone
            conn.sendall(f"{pid}\n".encode())

    def _child(self, conn: socket.socket, fds: list[int], start: dict[str, Any]) -> int:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self.selector.close()
            for sock in (self.listener, conn, *self.children.values()):
                sock.close()
            os.close(self.wakeup_r)
            os.close(self.wakeup_w)
            code = _run_server(fds, start)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
        return code

    def _launcher_gone(self, pid: int) -> None:
        """A launcher's connection closed before its server exited: it was killed outright
        (SIGKILL passes on no signal), so its server goes too."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        conn = self.children.get(pid)
        if conn is not None:
            self.selector.unregister(conn)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            if os.WIFSIGNALED(status):
                outcome = f"signal {os.WTERMSIG(status)}\n"
            else:
                outcome = f"exit {os.waitstatus_to_exitcode(status)}\n"
            with contextlib.suppress(OSError):
                conn.sendall(outcome.encode())
            conn.close()


def serve(address: str) -> None:
    sys.path.insert(0, str(HERE))
    for name in PRELOAD:
        __import__(name)
    gc.freeze()  # what was imported stays shared with every fork, untouched by the collector
    server = _Server(address)
    print("ready", flush=True)
    server.serve()


if __name__ == "__main__":
    serve(sys.argv[1])
