"""The launcher of an MCP test server forked by tests/mcp/forkserver.py: the command line the
client starts and the deployment's allowlist names.

    python forked.py ADDRESS SCRIPT ARGS...

Only the standard library, so it starts in a few milliseconds: it hands its stdin, stdout and
stderr, ``SCRIPT ARGS...``, its environment and folder to the fork server at ADDRESS, then
passes on the signals it gets (the client's SIGTERM at shutdown) and exits as the server did:
the same code, or killed by the same signal.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys


def main(address: str, argv: list[str]) -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(address)
    start = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [b"S"], [0, 1, 2])
    conn.sendall(struct.pack("!I", len(start)) + start)
    # The server holds the pipes now: without our ends, the client reads the end of the
    # server's stdout when it exits, not when we do.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    reply = conn.makefile("r", encoding="ascii")
    pid = int(reply.readline())

    def pass_on(number: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            os.kill(pid, number)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, pass_on)
    outcome = reply.readline().split()
    if len(outcome) != 2:
        print("forked: the fork server went away before the server exited", file=sys.stderr)
        sys.exit(1)
    how, number = outcome[0], int(outcome[1])
    if how == "signal":
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # no handler to take back
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    sys.exit(number)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
