"""Settings that are data, read as JSON from the environment (agentconsole/settings.py).

``NAME`` holds the JSON, or ``NAME_FILE`` names a file that does (a file the secret store mounts:
its content never shows in a process listing's environment). An error names the variable and a
position, never the content: it may hold secrets. Plain Python: settings import it before Django
is set up. Also here: the development secret key's file (``dev_secret_key``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from kombu import Exchange, Queue

from policy.domain import strict_json
from policy.domain.mcp_tools import mcp_stdio
from policy.domain.strict_json import JsonRefused


def parsed(name: str, raw: str) -> Any:
    """``raw`` read by ``strict_json`` (a key twice is a mistake to fix, not a value to guess);
    the error names the variable, the reason and a position, never the content."""
    try:
        return strict_json.loads(raw)
    except JsonRefused as exc:
        where = (
            f" at line {exc.extra['line']} column {exc.extra['column']}"
            if "line" in exc.extra
            else ""
        )
        raise RuntimeError(f"{name} must be JSON ({exc.code}{where})") from None


def json_from_env(name: str) -> Any:
    raw = os.environ.get(name, "").strip()
    path = os.environ.get(f"{name}_FILE", "").strip()
    if path:
        raw = Path(path).read_text(encoding="utf-8").strip()
    return parsed(name, raw) if raw else None


def positive_seconds(name: str, default: str) -> float:
    """A period in seconds: 0 would spin a loop, nan or infinity would never come round."""
    value = float(os.environ.get(name, default))
    if not 0 < value < float("inf"):
        raise RuntimeError(f"{name} must be a positive number of seconds")
    return value


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


def json_list(name: str) -> list[str]:
    """A JSON list of strings (unset: empty)."""
    value = json_from_env(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RuntimeError(f"{name} must be a JSON list of strings")
    return value


def mcp_stdio_commands(name: str = mcp_stdio.SETTING) -> tuple[tuple[str, ...], ...]:
    """The stdio MCP command lines the deployment allows: a JSON list of exact argv lists
    (policy/domain/mcp_tools/mcp_stdio.py). The old executable-only entries stop the start-up."""
    try:
        return mcp_stdio.parse_allowlist(json_from_env(name))
    except mcp_stdio.AllowlistInvalid as exc:
        raise RuntimeError(str(exc)) from None


def json_dict(name: str) -> dict[str, str]:
    """A JSON object of strings (unset: empty); the values may be secrets."""
    value = json_from_env(name)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise RuntimeError(f"{name} must be a JSON object of strings")
    return value


def model_endpoints() -> dict[str, dict[str, Any]]:
    raw = os.environ.get("AGENTCONSOLE_MODEL_ENDPOINTS", "").strip()
    configured = parsed("AGENTCONSOLE_MODEL_ENDPOINTS", raw) if raw else {}
    if not isinstance(configured, dict):
        raise RuntimeError("AGENTCONSOLE_MODEL_ENDPOINTS must be a JSON object")
    out: dict[str, dict[str, Any]] = {}
    allowed = {
        "base_url",
        "model",
        "timeout_s",
        "max_attempts",
        "max_output_tokens",
        "max_in_flight",
        "api_key_env",
    }
    for name, spec in configured.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("base_url"), str):
            raise RuntimeError(f"AGENTCONSOLE_MODEL_ENDPOINTS[{name!r}] needs a base_url")
        if set(spec) - allowed:
            # "api_key" included: a key goes in its own variable, named by "api_key_env".
            raise RuntimeError(
                f"AGENTCONSOLE_MODEL_ENDPOINTS[{name!r}] takes only {', '.join(sorted(allowed))}"
            )
        key_env = spec.get("api_key_env")
        out[name] = {k: v for k, v in spec.items() if k != "api_key_env"}
        out[name]["api_key"] = os.environ.get(key_env, "") if key_env else ""
    base_url = os.environ.get("AGENTCONSOLE_MODEL_BASE_URL", "").strip()
    if base_url:
        out[os.environ.get("AGENTCONSOLE_MODEL_ENDPOINT", "default").strip() or "default"] = {
            "base_url": base_url,
            "api_key": os.environ.get("AGENTCONSOLE_MODEL_API_KEY", ""),
            "model": os.environ.get("AGENTCONSOLE_MODEL_NAME", ""),
            "timeout_s": float(os.environ.get("AGENTCONSOLE_MODEL_TIMEOUT_S", "60")),
            "max_in_flight": int(os.environ.get("AGENTCONSOLE_MODEL_MAX_IN_FLIGHT", "64")),
        }
    return out


def proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto`` -> ("HTTP_X_FORWARDED_PROTO", "https"). Set it only behind a proxy
    that terminates TLS and always sets (overwrites) that header: a client could send it too."""
    name = value.strip()
    if not name:
        return None
    return "HTTP_" + name.upper().replace("-", "_"), "https"


def model_calls() -> tuple[str, float, float]:
    """(AGENTCONSOLE_MODEL_CALLS, AGENTCONSOLE_GATEWAY_LEASE_S, AGENTCONSOLE_GATEWAY_POLL_S).

    "gateway" (the default): a worker records a model planner's request and lets go of the run;
    the gateway process (``manage.py gateway``) makes the call and sends the run back with the
    reply recorded. "inline": the worker calls the model and waits (one run thinking per worker
    process). A gateway holds each call under a lease it renews; once a dead gateway's lease
    lapses another sends the call again (a second attempt, recorded). Without Redis no doorbell
    rings: an idle gateway looks for requests every poll interval.
    """
    mode = os.environ.get("AGENTCONSOLE_MODEL_CALLS", "gateway").strip().lower()
    if mode not in ("gateway", "inline"):
        raise RuntimeError("AGENTCONSOLE_MODEL_CALLS must be 'gateway' or 'inline'")
    lease_s = float(os.environ.get("AGENTCONSOLE_GATEWAY_LEASE_S", "30"))
    poll_s = float(os.environ.get("AGENTCONSOLE_GATEWAY_POLL_S", "0.2"))
    return mode, lease_s, poll_s


def postgres_pool() -> dict[str, Any]:
    """The per-process PostgreSQL connection pool (Django's ``OPTIONS["pool"]``, psycopg_pool).

    Under ASGI every request runs in a thread of its own, and per-thread persistent connections
    (``CONN_MAX_AGE``) piled up until PostgreSQL refused new clients (the soak: ~48 per web
    process). A bounded pool per process instead: a request waits up to ``DB_POOL_TIMEOUT_S``
    for a connection, then gets 503 ``DATABASE_UNAVAILABLE``."""
    return {
        "min_size": int(os.environ.get("DB_POOL_MIN_SIZE", "1")),
        "max_size": int(os.environ.get("DB_POOL_MAX_SIZE", "10")),
        "timeout": float(os.environ.get("DB_POOL_TIMEOUT_S", "10")),
    }


# Requests a web process lets into Django at once by default (fewer where the pool is smaller:
# each takes a pooled connection). One interpreter runs them all: four keep it busy while some
# wait on PostgreSQL, and more only add threads contending for its lock. Measured with the
# runs-in-flight bench (200 creates at once, 2 cores), seven interleaved pairs against 10: the
# web's CPU lower in six, wall median 16.7 s against 18.3 s, per-run p50 lower in all seven.
WEB_MAX_REQUESTS_DEFAULT = 4


def web_admission() -> tuple[int, float]:
    """(requests a web process serves at once, seconds one may wait for its turn):
    ``WEB_MAX_REQUESTS`` (default ``WEB_MAX_REQUESTS_DEFAULT``, or ``DB_POOL_MAX_SIZE`` when
    that is smaller: a thread and a connection each) and ``WEB_QUEUE_TIMEOUT_S`` (default 60),
    agentconsole/ops/admission.py."""
    pool = int(os.environ.get("DB_POOL_MAX_SIZE", "10"))
    limit = int(os.environ.get("WEB_MAX_REQUESTS") or min(WEB_MAX_REQUESTS_DEFAULT, pool))
    return limit, float(os.environ.get("WEB_QUEUE_TIMEOUT_S", "60"))


def queues() -> tuple[str, str, tuple[Any, ...]]:
    """(the runs' queue, the control queue, both as Celery's ``task_queues``).

    Runs go to ``AGENTCONSOLE_QUEUE``. The periodic sweep and the runs it recovers from a dead
    worker go to ``AGENTCONSOLE_CONTROL_QUEUE`` (default: the runs' queue's name + ``-control``),
    which every worker started without ``-Q`` consumes beside the runs' queue: neither a sweep
    nor a recovery waits behind a backlog of runs. A recovered run goes back to the runs' queue
    after its first slice (runs.tasks).

    The control queue is declared first: a worker consumes the queues in this order, and on
    Redis it looks at them in that order too (``queue_order_strategy``, settings), so a free
    worker takes a sweep or a recovered run before the next run of the backlog."""
    runs = os.environ.get("AGENTCONSOLE_QUEUE", "celery")
    control = os.environ.get("AGENTCONSOLE_CONTROL_QUEUE") or f"{runs}-control"
    declared = tuple(Queue(q, Exchange(q), routing_key=q) for q in (control, runs))
    return runs, control, declared


def dev_secret_key(var_dir: Path) -> str:
    """Read ``var/secret_key``, creating it on first use (dev only; ``var/`` is never committed).

    The web server and the worker import settings at the same moment on first start, so the key is
    written to a temporary file and hard-linked into place: ``os.link`` fails if another process won
    the race, and then everyone reads the winner's key. No reader ever sees a half-written file.
    """
    path = var_dir / "secret_key"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=var_dir, prefix=".secret_key.")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(50))
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    return path.read_text().strip()
