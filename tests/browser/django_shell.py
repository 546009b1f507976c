"""One Django process beside the live console for what a test writes straight to its database
(an account with a role, a document, a tampered trace row): the code ``manage.py shell -c`` would
run, in a process that stays up.

A ``manage.py shell`` per write set Django up each time, ~1.8 s of CPU, and the browser tests made
25 of them. Here each piece of code is executed as ``shell -c`` executes it (a namespace of its
own; what it prints is returned) and nothing else changes: autocommit, so the console's web and
worker processes see each write once the call returns. A failure raises with the traceback.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SERVE = """
import contextlib, io, json, os, sys, traceback
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")
import django
django.setup()
replies = sys.stdout
for line in sys.stdin:
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(json.loads(line), {})
        reply = {"out": printed.getvalue()}
    except Exception:
        reply = {"out": printed.getvalue(), "error": traceback.format_exc()}
    replies.write(json.dumps(reply) + "\\n")
    replies.flush()
"""


class DjangoShell:
    def __init__(self, root: Path, env: dict[str, str], timeout_s: float = 120) -> None:
        self.timeout_s = timeout_s
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - kept open while it runs
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-c", SERVE],
            cwd=root, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
        )  # fmt: skip
        self.replies: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.replies.put(line)
        self.replies.put("")  # the process ended

    def run(self, code: str) -> str:
        """Execute ``code`` as ``manage.py shell -c`` would; what it printed."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(code) + "\n")
        self.process.stdin.flush()
        try:
            line = self.replies.get(timeout=self.timeout_s)
        except queue.Empty:
            raise AssertionError(f"the Django shell took over {self.timeout_s} s") from None
        if not line:
            self.stderr.seek(0)
            raise AssertionError(f"the Django shell ended:\n{self.stderr.read()[-3000:]}")
        reply = json.loads(line)
        if "error" in reply:
            raise AssertionError(f"shell code failed:\n{reply['error'][-3000:]}")
        return str(reply["out"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()  # its loop ends, and with it the process
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()
