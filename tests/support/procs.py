"""Processes seen through Linux ``/proc`` (psutil is not installed): children, process groups,
command lines, and the processes a worker cluster tagged in their environment."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Every process started for a cluster carries this variable (inherited by pool children,
# isolated tool children and theirs), so teardown finds whatever is left of it.
TAG_ENV = "AGENTCONSOLE_FAULTS_TAG"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    state: str
    starttime: int


def proc(pid: int) -> Proc | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid pgrp session ... starttime(22nd)"; comm may contain spaces.
    rest = raw[raw.rindex(")") + 2 :].split()
    return Proc(pid, int(rest[1]), int(rest[2]), rest[0], int(rest[19]))


def all_procs() -> list[Proc]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            p = proc(int(entry))
            if p is not None:
                out.append(p)
    return out


def alive(pid: int, starttime: int | None = None) -> bool:
    """Running (a zombie is dead; a reused pid with another start time is someone else)."""
    p = proc(pid)
    if p is None or p.state in ("Z", "X"):
        return False
    return starttime is None or p.starttime == starttime


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def environ_has(pid: int, needle: str) -> bool:
    try:
        return needle.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def children(pid: int) -> list[Proc]:
    return [p for p in all_procs() if p.ppid == pid]


def group(pgrp: int) -> list[Proc]:
    return [p for p in all_procs() if p.pgrp == pgrp and p.state not in ("Z", "X")]


def tagged(tag: str) -> list[Proc]:
    mine = os.getpid()
    return [
        p
        for p in all_procs()
        if p.pid != mine and p.state not in ("Z", "X") and environ_has(p.pid, f"{TAG_ENV}={tag}")
    ]


def kill_all(procs: Iterable[Proc]) -> list[int]:
    """SIGKILL each process that is still the one we saw (same start time); return their pids."""
    killed = []
    for p in procs:
        if alive(p.pid, p.starttime):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
                killed.append(p.pid)
    return killed
