"""Settings for agentconsole, read from the environment only.

With no environment at all the project runs in its *embedded* mode: a SQLite file, an in-memory
channel layer and a Celery worker fed by kombu's filesystem transport, all under ``var/``. Setting
``DATABASE_URL`` and ``REDIS_URL`` switches to the scale-out deployment (PostgreSQL, Redis) without
any code change.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, cast

import dj_database_url

from agentconsole.config import csp_policy, env
from agentconsole.config.notify_env import *  # noqa: F403 -- notifications, e-mail (issue 24)
from agentconsole.config.otel_env import otel_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)


def _env_bool(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = _env_bool("DEBUG", "1")
if not DEBUG and not os.environ.get("SECRET_KEY"):
    # Several hosts must share one key (sessions, signed tokens); a per-host file would not.
    raise RuntimeError("SECRET_KEY must be set when DEBUG is off")
SECRET_KEY = os.environ.get("SECRET_KEY") or env.dev_secret_key(VAR_DIR)
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
# Full origins (scheme://host[:port]) besides the request's own that may POST with a session
# cookie and open a websocket on it (agentconsole/access/ws_auth.py): https://console.example.com
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS")

# A request that carries this header with the value "https" is treated as secure (is_secure(),
# the CSRF origin check, the websocket origin check).
SECURE_PROXY_SSL_HEADER = env.proxy_ssl_header(os.environ.get("SECURE_PROXY_SSL_HEADER", ""))

INSTALLED_APPS = [
    # For `manage.py runserver` only (daphne's ASGI server, first): its import installs Twisted's
    # reactor, 0.25 s of every other Django process's start. scripts/web.sh runs daphne itself.
    *(["daphne"] if sys.argv[1:2] == ["runserver"] else []),
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    # The project package: system checks only (agentconsole/checks.py), no models.
    "agentconsole.apps.AgentconsoleConfig",
    "policy",
    "runs",
    "memory",
    "notify",
]

MIDDLEWARE = [
    "csp.middleware.CSPMiddleware",  # its header on every answer, the next two's answers too
    # Sees every answer; under /api/ an error is always the JSON shape.
    "agentconsole.errors.ApiErrorMiddleware",
    "agentconsole.middleware.RejectNulMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The console's CSS/JS from this process (daphne serves no files), with DEBUG on or off.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
CONTENT_SECURITY_POLICY = csp_policy.CONTENT_SECURITY_POLICY  # issue 21 item 10 (csp_policy.py)

ROOT_URLCONF = "agentconsole.urls"
WSGI_APPLICATION = "agentconsole.wsgi.application"
ASGI_APPLICATION = "agentconsole.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # roles, nav: what the signed-in person may open (the console's top bar).
                "agentconsole.context_processors.console",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}")
    ),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Wait for the writer lock instead of failing at once: web and worker share one file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        # WAL: readers never block the writer (web and worker share the file) and a commit
        # needs no fsync of the whole database; NORMAL is durable across application crashes.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        # Take the write lock at BEGIN: a read-then-write transaction can otherwise fail with
        # "database is locked" when two processes upgrade their locks at once.
        "transaction_mode": "IMMEDIATE",
    }
    # A file (not :memory:) so a worker process can share the test database; the name can be
    # set per checkout or session so parallel test runs never share one file.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("AGENTCONSOLE_TEST_DB") or str(VAR_DIR / "test-db.sqlite3")
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A bounded connection pool per process (env.postgres_pool: per-thread persistent ones piled
    # up under ASGI); Celery closes it in each prefork child. Checked before use.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = env.postgres_pool()
    # Parameters sent apart from the statement (psycopg's server-side binding) instead of quoted
    # into its text in Python for every value of every statement: runs-in-flight bench, N = 200,
    # interleaved: about 15 % less CPU in web, workers and PostgreSQL; a run of only short
    # values pays a few per cent more (persisted steps/s; both in docs/benchmarks.md).
    # Prepared statements stay off (Django's default), so a pooler in transaction mode still
    # works; DB_SERVER_SIDE_BINDING=0 goes back to client-side binding.
    DATABASES["default"]["OPTIONS"]["server_side_binding"] = _env_bool(
        "DB_SERVER_SIDE_BINDING", "1"
    )
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

# HTTP requests in Django at once per web process; the rest wait (agentconsole/ops/admission.py).
WEB_MAX_REQUESTS, WEB_QUEUE_TIMEOUT_S = env.web_admission()

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# The console signs in with Django's session login; the API also takes tokens.
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where `collectstatic` writes (and, with DEBUG=0, the only place files are served from).
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or VAR_DIR / "static")
# Served straight from static/ (no collectstatic step needed); `collectstatic` still works and is
# then what is served. Looked up per request, as WhiteNoise does under DEBUG, not listed when a
# middleware chain is built: a test client builds one each, and listing the ~180 files the finders
# hold took 28 ms of CPU each time (a quarter of the API tests' time).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
os.makedirs(STATIC_ROOT, exist_ok=True)  # WhiteNoise warns on every start when it is missing

DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # 1 MiB

# Errors outside DRF views: JSON under /api/, a short page elsewhere, never a traceback or the
# settings (also with DEBUG=1: the traceback goes to the log). agentconsole/errors.py.
CSRF_FAILURE_VIEW = "agentconsole.errors.csrf_failure"
DEFAULT_EXCEPTION_REPORTER = "agentconsole.errors.QuietExceptionReporter"

# --- HTTP API ---------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: an anonymous caller then gets 401 with WWW-Authenticate, not 403.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "agentconsole.kernel.http.exception_handler",
    "DEFAULT_PARSER_CLASSES": ["agentconsole.kernel.http.LimitedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agentconsole API",
    "DESCRIPTION": "Governed agent runtime: runs, trace, confirmations, handoffs, preferences.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI assets from the sidecar package: no CDN, works on a closed network.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- Realtime and workers ---------------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "")

CHANNEL_LAYERS: dict[str, dict[str, Any]]
if REDIS_URL:
    _layer = "channels_redis.core.RedisChannelLayer"
    CHANNEL_LAYERS = {"default": {"BACKEND": _layer, "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    # Per process only: the doorbell rings within the web process; consumers also tail the
    # database, which is the truth in both deployments.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# An open websocket checks its token or session and its user's roles at least this often; a
# revocation rings it at once, this bounds a lost ring and an expiry (runs/web/socket_guard.py).
AGENTCONSOLE_WS_RECHECK_S = env.positive_seconds("AGENTCONSOLE_WS_RECHECK_S", "30")

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL or "agentfs://"
if CELERY_BROKER_URL.startswith(("agentfs://", "filesystem://")):
    # Embedded mode: a real worker process with no broker server. Producers and the worker share
    # one folder; a message is written under a temporary name and renamed into place, so a
    # worker never reads half a message (agentconsole/kernel/broker.py; kombu's own transport can).
    # AGENTCONSOLE_BROKER_DIR lets a test or the fault lab give its worker a private queue.
    _broker_root = Path(os.environ.get("AGENTCONSOLE_BROKER_DIR") or VAR_DIR / "broker")
    _broker_queue = _broker_root / "queue"
    _broker_processed = _broker_root / "processed"
    _broker_control = _broker_root / "control"
    for _folder in (_broker_queue, _broker_processed, _broker_control):
        os.makedirs(_folder, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_queue),
        "data_folder_out": str(_broker_queue),
        "processed_folder": str(_broker_processed),
        # Exchange tables for fanout (worker remote control); kombu's default is ./control.
        "control_folder": str(_broker_control),
        # kombu polls the folder; its 1 s default would add up to a second to every hand-off.
        "polling_interval": 0.05,
    }
else:
    # A free worker takes the control queue (declared first) before the runs' (env.queues).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"queue_order_strategy": "priority"}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The runs' queue (one per deployment, or per test stack, sharing a broker) and the control
# queue of the sweep and the runs it recovers; a worker consumes both (env.queues).
CELERY_TASK_DEFAULT_QUEUE, AGENTCONSOLE_CONTROL_QUEUE, CELERY_TASK_QUEUES = env.queues()
# Outcomes live in the database (runs, ledger); Celery results would be a second, weaker truth.
CELERY_TASK_IGNORE_RESULT = True
# Acknowledge after the task body: a worker killed mid-task leaves the message for redelivery
# (where the broker supports it); tasks are idempotent by ledger token.
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The sweeper (runs.engine.sweeper): stranded runs back to a worker, overdue confirmations
# cancelled.
SWEEP_INTERVAL_S = float(os.environ.get("SWEEP_INTERVAL_S", "5"))
CELERY_BEAT_SCHEDULE = {
    # A sweep nobody took within an interval expires unrun (the next is queued): sweeps piled up
    # while every worker was busy, and recovered runs queued behind them (README "Soak test").
    "sweep": {"task": "runs.sweep", "schedule": SWEEP_INTERVAL_S,
              "options": {"queue": AGENTCONSOLE_CONTROL_QUEUE, "expires": SWEEP_INTERVAL_S}},
    # Retention: expired long-term memory records are purged (an audit entry stays).
    "purge-memory": {"task": "memory.purge_expired", "schedule": 3600.0},
    # Notifications: due retries, outbox rows a lost message left
    # (agentconsole/config/notify_env.py).
    "notify-deliver": NOTIFY_BEAT,  # noqa: F405
}  # fmt: skip

# --- Sign-in throttle, API tokens, cache (issue 9 item 8; agentconsole/access/auth.py) -----------
# A block of its own, apart from REST_FRAMEWORK above, so that other changes there merge cleanly.

# Failed sign-ins allowed per account and per client address in a sliding window; then 429.
AGENTCONSOLE_LOGIN_WINDOW_S = float(os.environ.get("AGENTCONSOLE_LOGIN_WINDOW_S", "900"))
AGENTCONSOLE_LOGIN_FAILURES_PER_ACCOUNT = int(
    os.environ.get("AGENTCONSOLE_LOGIN_FAILURES_PER_ACCOUNT", "5")
)
AGENTCONSOLE_LOGIN_FAILURES_PER_ADDRESS = int(
    os.environ.get("AGENTCONSOLE_LOGIN_FAILURES_PER_ADDRESS", "20")
)
# Behind a reverse proxy every client has the proxy's address: name the header the proxy sets
# (e.g. X-Forwarded-For; its last entry is used). Unset: REMOTE_ADDR.
AGENTCONSOLE_CLIENT_IP_HEADER = os.environ.get("AGENTCONSOLE_CLIENT_IP_HEADER", "").strip()
# API tokens expire this long after they were created (7 days).
AGENTCONSOLE_TOKEN_TTL_S = float(os.environ.get("AGENTCONSOLE_TOKEN_TTL_S", str(7 * 24 * 3600)))
# Every sign-in is throttled:
AUTHENTICATION_BACKENDS = ["agentconsole.access.auth.ThrottledModelBackend"]
REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"] = [
    # Token first: an anonymous caller then gets 401 with WWW-Authenticate, not 403.
    "agentconsole.access.auth.ExpiringTokenAuthentication",
    "rest_framework.authentication.SessionAuthentication",
]
# Rate counts, shared by every web process: Redis with REDIS_URL; else the one process's memory.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "agentconsole.kernel.redis_cache.SharedRedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "agentconsole",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- agentconsole -----------------------------------------------------------------------------

# How long a worker's claim on a run lasts without renewal (renewed every 0.2 s while working).
AGENTCONSOLE_LEASE_TTL_S = float(os.environ.get("AGENTCONSOLE_LEASE_TTL_S", "15"))
# How often a worker's main process looks for runs held by dead processes of its host and sends
# them on (agentconsole/ops/worker_lifecycle.py); 0: never (the lease TTL and the sweep, as for a
# worker that died on another host).
AGENTCONSOLE_REAP_INTERVAL_S = float(os.environ.get("AGENTCONSOLE_REAP_INTERVAL_S", "1"))

# Dotted paths of extra tool contracts to register, e.g. "myorg.tools.lookup_invoice".
AGENTCONSOLE_TOOLS: list[str] = _env_list("AGENTCONSOLE_TOOLS")

# Per-tool confirmation policy, auto constraints and approvers (README "Tool policy
# reference"), as a JSON object; checked against the registered tools at start-up (E002).
AGENTCONSOLE_TOOL_POLICY: dict[str, Any] = env.parsed(
    "AGENTCONSOLE_TOOL_POLICY", os.environ.get("AGENTCONSOLE_TOOL_POLICY", "").strip() or "{}"
)

# Root under which tools such as write_artifact may write; nothing escapes it.
AGENTCONSOLE_RUN_OUTPUT_ROOT = Path(
    os.environ.get("AGENTCONSOLE_RUN_OUTPUT_ROOT", str(VAR_DIR / "run-output"))
)

# Demo accounts on `make run` (load_demo --auto; development only, never with DEBUG off):
# "auto" loads them on a fresh database (no user yet), "1" on every start (creating missing demo
# users; an existing user's password is never reset), "0" never.
AGENTCONSOLE_DEMO = os.environ.get("AGENTCONSOLE_DEMO", "auto").strip().lower()

# Fault injection (runs.fault_lab.faults) for the fault lab and the tests only. Off: workers use the
# plain executor (no fault lookup per tool call, no SIGKILL code reachable) and a run with a
# ``faults`` block is refused at creation (FAULTS_DISABLED). Never set it on a deployment that
# serves users.
AGENTCONSOLE_FAULTS_ENABLED = _env_bool("AGENTCONSOLE_FAULTS_ENABLED", "0")

# Server-side secrets injected into tools by the executor, keyed by tool name. They are never
# logged and never appear in a proposal, an observation, the trace or a websocket frame.
AGENTCONSOLE_TOOL_SECRETS: dict[str, dict[str, str]] = {}

# Secrets of MCP servers (docs/mcp.md), by name: a server spec names the secrets it needs (an
# environment variable of a stdio server, a header of an HTTP server), injected at call time.
AGENTCONSOLE_MCP_SECRETS: dict[str, str] = env.json_dict("AGENTCONSOLE_MCP_SECRETS")
# The whole command lines (exact argv lists) a stdio MCP server may be started with: a program
# the workers or the gateway run, so the deployment names them; empty: stdio refused.
AGENTCONSOLE_MCP_STDIO_COMMANDS: tuple[tuple[str, ...], ...] = env.mcp_stdio_commands()
# How long listing a server's tools may take; MCP calls the gateway makes at once per server.
AGENTCONSOLE_MCP_LIST_TIMEOUT_S = float(os.environ.get("AGENTCONSOLE_MCP_LIST_TIMEOUT_S", "10"))
AGENTCONSOLE_MCP_MAX_IN_FLIGHT = int(os.environ.get("AGENTCONSOLE_MCP_MAX_IN_FLIGHT", "16"))

# Extra regular expressions for the secret scanner (policy.domain.secrets.redaction), on top of the
# built-in token shapes and secret-like key=value pairs. From the environment: a JSON list of
# strings (regexes hold commas, so not a comma list). Each whole match is stored as a tag.
AGENTCONSOLE_SECRET_PATTERNS: list[str] = env.json_list("AGENTCONSOLE_SECRET_PATTERNS")

# --- OpenTelemetry: off unless asked for (agentconsole/config/otel_env.py says how) ---------------
AGENTCONSOLE_OTEL, AGENTCONSOLE_OTEL_ENDPOINT, AGENTCONSOLE_OTEL_SERVICE_NAME = otel_settings()

# --- Logging ----------------------------------------------------------------------------------

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO").upper()},
    # Django's own handler would print request warnings a second time.
    "loggers": {"django": {"handlers": [], "propagate": True}},
}

# --- Per-subject limits (issue 9 item 10; runs/start/limits.py) -----------------------------------
# One subject must not stall everyone. Each limit counts per subject (whom a run acts for); 0
# switches a limit off. Refusals: ACTIVE_RUNS_LIMIT (429), STEP_BUDGET_TOO_LARGE (400),
# DEADLINE_TOO_FAR (400), DAILY_STEP_QUOTA_EXHAUSTED (429 + Retry-After), RUN_CREATE_THROTTLED
# (429 + Retry-After).

# Non-terminal runs (created, running, waiting for a person, cancelling) one subject may have.
AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = int(
    os.environ.get("AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT", "10")
)
# Ceiling on a run's step budget (budgets.max_steps); a request above it is refused.
AGENTCONSOLE_MAX_STEPS_PER_RUN = int(os.environ.get("AGENTCONSOLE_MAX_STEPS_PER_RUN", "1000"))
# Ceiling on a run's deadline (budgets.deadline_ms, relative to creation); default one day.
AGENTCONSOLE_MAX_DEADLINE_MS = int(os.environ.get("AGENTCONSOLE_MAX_DEADLINE_MS", "86400000"))
# Planner steps per subject per UTC day, over all its runs; a run that meets it mid-flight stops
# with DAILY_STEP_QUOTA_EXHAUSTED and a handoff.
AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT = int(
    os.environ.get("AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT", "20000")
)
# Runs a user may start per period ("<n>/<sec|min|hour|day>"; "" = off), API and console alike
# (runs/start/limits.py), counted in the default cache: Redis when several web processes serve.
AGENTCONSOLE_RUN_CREATE_RATE = os.environ.get("AGENTCONSOLE_RUN_CREATE_RATE", "30/min")
# Fairness: a worker advances a run for at most this many planner steps, then hands it back to
# the end of the queue so other subjects' runs interleave (0 = until it waits or ends).
AGENTCONSOLE_WORKER_SLICE_STEPS = int(os.environ.get("AGENTCONSOLE_WORKER_SLICE_STEPS", "20"))

# --- Model endpoints (issue 12 item 1; runs/planners/openai_planner.py) ------------------------
# OpenAI-compatible chat-completions endpoints a model planner may use, by name. A run's or
# profile's planner names one ({"kind": "openai", "endpoint": "<name>", "model": "<optional>"});
# the URL and key live here only, never in a run record, trace, log or profile.
#
# One endpoint: AGENTCONSOLE_MODEL_BASE_URL (+ AGENTCONSOLE_MODEL_API_KEY, AGENTCONSOLE_MODEL_NAME,
# AGENTCONSOLE_MODEL_TIMEOUT_S), named by AGENTCONSOLE_MODEL_ENDPOINT (default "default").
# Several: AGENTCONSOLE_MODEL_ENDPOINTS, a JSON object {"<name>": {"base_url", "model",
# "timeout_s", "max_attempts", "max_output_tokens", "max_in_flight", "api_key_env"}}, where
# "api_key_env" names the environment variable holding that endpoint's key (never the key).
AGENTCONSOLE_MODEL_ENDPOINTS: dict[str, dict[str, Any]] = env.model_endpoints()
# Calls runs wait on (issue 22; runs/calls/; README "Runs in flight"): env.model_calls().
AGENTCONSOLE_MODEL_CALLS, AGENTCONSOLE_GATEWAY_LEASE_S, AGENTCONSOLE_GATEWAY_POLL_S = (
    env.model_calls()
)
# The client libraries log request bodies (observations, preferences) at DEBUG and URLs at
# INFO: keep them to warnings, whatever the root level says.
LOGGING["loggers"] = {
    **cast("dict[str, Any]", LOGGING.get("loggers", {})),
    "openai": {"level": "WARNING"},
    "httpx": {"level": "WARNING"},
}

# --- Production (issue 14; README "Deploy to production") -------------------------------------
# Everything a deployment sets, in one block. The defaults follow DEBUG: with DEBUG=0 the cookies
# are HTTPS-only and plain HTTP is redirected, so a production start is safe unless told
# otherwise; with DEBUG=1 (`make run`) nothing here changes the development server.

# HTTPS: redirect plain HTTP (a TLS proxy that redirects by itself may switch this off). The
# probes and the scrape are exempt: an orchestrator and Prometheus call a process directly, over
# plain HTTP, on its private address.
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", "0" if DEBUG else "1")
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SESSION_COOKIE_SECURE = _env_bool("SESSION_COOKIE_SECURE", "0" if DEBUG else "1")
CSRF_COOKIE_SECURE = _env_bool("CSRF_COOKIE_SECURE", "0" if DEBUG else "1")
# HSTS is off until set: once a browser saw it, the site cannot go back to HTTP for that long.
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", "0")
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", "0")

# Static files. Development: straight from static/ and the apps (no collectstatic step).
# Production: only what `manage.py collectstatic` wrote to STATIC_ROOT, with hashed names (cached
# for a year by browsers and proxies) and gzip/brotli copies, served by WhiteNoise from each web
# process. A missing file is then an error at render time, not a silent 404.
if not DEBUG:
    WHITENOISE_USE_FINDERS = False
    WHITENOISE_AUTOREFRESH = False
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }

# Configuration that is data: JSON in the environment, or a file for secrets
# (agentconsole/config/env.py).
AGENTCONSOLE_TOOL_SECRETS = env.tool_secrets() or AGENTCONSOLE_TOOL_SECRETS
if (_memory_keys := env.memory_keys()) is not None:  # unset: memory's built-in whitelist
    AGENTCONSOLE_MEMORY_KEYS = _memory_keys
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A database that does not answer fails a request (and /readyz) in seconds, not minutes.
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = int(
        os.environ.get("DB_CONNECT_TIMEOUT_S", "5")
    )

# Processes (scripts/web.sh, scripts/worker.sh, scripts/beat.sh). On SIGTERM a worker stops
# taking tasks and lets the current one finish for up to this many seconds (Celery's soft
# shutdown; scripts/worker.sh maps SIGTERM to it), then stops it: its message goes back to the
# broker (acks_late) and its runs are released (runs.engine.leases.release_dead_local).
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = float(os.environ.get("AGENTCONSOLE_WORKER_SHUTDOWN_S", "10"))

# Health and metrics (agentconsole/ops/health.py, agentconsole/ops/metrics.py). Each worker writes a
# heartbeat this often; /readyz wants one younger than the maximum age.
AGENTCONSOLE_WORKER_HEARTBEAT_S = float(os.environ.get("AGENTCONSOLE_WORKER_HEARTBEAT_S", "5"))
AGENTCONSOLE_READY_HEARTBEAT_MAX_AGE_S = float(
    os.environ.get("AGENTCONSOLE_READY_HEARTBEAT_MAX_AGE_S", "30")
)
# How long /readyz waits for each dependency before calling it down.
AGENTCONSOLE_READY_TIMEOUT_S = float(os.environ.get("AGENTCONSOLE_READY_TIMEOUT_S", "2"))
# /metrics: `Authorization: Bearer <this>` (Prometheus), or a signed-in operator/admin. Unset:
# operators and admins only (session or API token).
AGENTCONSOLE_METRICS_TOKEN = os.environ.get("AGENTCONSOLE_METRICS_TOKEN", "")

# Logs: LOG_FORMAT=json writes one JSON object per line with run_id (and trace ids once tracing
# is on) where known (agentconsole/ops/logs.py).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "plain").strip().lower()
LOGGING["filters"] = {"run_context": {"()": "agentconsole.ops.logs.RunContextFilter"}}
LOGGING["formatters"]["json"] = {"()": "agentconsole.ops.logs.JsonFormatter"}
LOGGING["handlers"]["console"]["filters"] = ["run_context"]
if LOG_FORMAT == "json":
    LOGGING["handlers"]["console"]["formatter"] = "json"
