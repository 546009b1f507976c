"""Gateway processes for tests (``manage.py gateway``, as scripts/gateway.sh starts it), started
with a worker cluster's environment (its database and queue), each in a session of its own so a
test can SIGKILL one mid-call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import workers as w

BASE_DIR = Path(__file__).resolve().parents[2]


class Gateways:
    """Gateway processes started with a cluster's environment (its database and queue)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> subprocess.Popen[str]:
        with (self.logs / f"gateway-{len(self.procs)}.log").open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "gateway", "--shutdown-s", "1"],
                cwd=BASE_DIR,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text()[-3000:]}" for p in sorted(self.logs.iterdir())
        )

    def kill(self, proc: subprocess.Popen[str]) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        w.stop(self.procs)
