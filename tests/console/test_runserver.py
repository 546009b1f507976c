"""`manage.py runserver` is daphne's ASGI server (the console's websockets in development), and
only that command installs daphne's app: importing it installs Twisted's reactor, a quarter of a
second of every other Django process's start (agentconsole/settings.py, INSTALLED_APPS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


def test_runserver_is_daphnes() -> None:
    assert "--websocket_handshake_timeout" in _manage("runserver", "--help")


def test_another_command_does_without_daphnes_reactor() -> None:
    code = (
        "import sys; import django; from django.conf import settings; "
        "print('daphne' in settings.INSTALLED_APPS, 'twisted.internet.reactor' in sys.modules)"
    )
    assert _manage("shell", "-c", code).splitlines()[-1].split() == ["False", "False"]
