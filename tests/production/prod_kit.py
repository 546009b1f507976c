"""The documented production environment, read from docs/deploy.md (the block fenced as
```env), so that the test checks what the deploy guide promises."""

from __future__ import annotations

import os
import re
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def documented_env() -> dict[str, str]:
    text = DEPLOY.read_text(encoding="utf-8")
    found = re.search(r"```env\n(.*?)```", text, re.S)
    assert found, "docs/deploy.md has no ```env block (the production environment)"
    env = {}
    for line in found.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


def production_env() -> dict[str, str]:
    """The documented environment with its placeholders filled for a local test: a fresh
    secret key, this machine's names, and the proxy header the test sends."""
    env = documented_env()
    env["SECRET_KEY"] = "prod-test-" + os.urandom(32).hex()
    env["ALLOWED_HOSTS"] = "127.0.0.1,localhost"
    env["CSRF_TRUSTED_ORIGINS"] = "https://127.0.0.1"
    return env
