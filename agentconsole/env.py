"""Settings that are data, read as JSON from the environment (agentconsole/settings.py).

``NAME`` holds the JSON, or ``NAME_FILE`` names a file that does (a file the secret store mounts:
its content never shows in a process listing's environment). An error names the variable and a
position, never the content: it may hold secrets. Plain Python: settings import it before Django
is set up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def json_from_env(name: str) -> Any:
    raw = os.environ.get(name, "").strip()
    path = os.environ.get(f"{name}_FILE", "").strip()
    if path:
        raw = Path(path).read_text(encoding="utf-8").strip()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"{name} must be JSON: line {exc.lineno} column {exc.colno}") from None


def tool_secrets(name: str = "AGENTCONSOLE_TOOL_SECRETS") -> dict[str, dict[str, str]] | None:
    """``{"tool_name": {"secret_name": "value"}}``: what the executor injects into each tool."""
    value = json_from_env(name)
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) for v in value.values()
    ):
        raise RuntimeError(f"{name} must map tool names to {{name: string}}")
    return value


def memory_keys(name: str = "AGENTCONSOLE_MEMORY_KEYS") -> list[dict[str, Any]] | None:
    """The memory key whitelist; memory/policies.py checks each entry at start-up."""
    value = json_from_env(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(k, dict) for k in value):
        raise RuntimeError(f"{name} must be a JSON list of key objects")
    return value
