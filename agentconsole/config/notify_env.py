"""Settings of notifications (issue 24 item 4; notify/, docs/notifications.md) and of Django's
mail backend, from the environment. ``settings.py`` imports every name in ``__all__``; plain
Python, read before Django is set up."""

from __future__ import annotations

import os
from typing import Any

from agentconsole.config.env import positive_seconds

__all__ = [
    "AGENTCONSOLE_NOTIFY_BACKOFF_MAX_S",
    "AGENTCONSOLE_NOTIFY_BACKOFF_S",
    "AGENTCONSOLE_NOTIFY_FROM",
    "AGENTCONSOLE_NOTIFY_INTERVAL_S",
    "AGENTCONSOLE_NOTIFY_MAX_ATTEMPTS",
    "AGENTCONSOLE_NOTIFY_TIMEOUT_S",
    "AGENTCONSOLE_PUBLIC_URL",
    "EMAIL_BACKEND",
    "EMAIL_HOST",
    "EMAIL_HOST_PASSWORD",
    "EMAIL_HOST_USER",
    "EMAIL_PORT",
    "EMAIL_TIMEOUT",
    "EMAIL_USE_TLS",
    "NOTIFY_BEAT",
]


def _on(name: str, default: str) -> bool:
    # As settings._env_bool reads DEBUG.
    return os.environ.get(name, default).strip().lower() in {"1", "true", "yes", "on"}


# The console's address as people reach it: links in webhooks and e-mails start with it.
AGENTCONSOLE_PUBLIC_URL = os.environ.get("AGENTCONSOLE_PUBLIC_URL", "http://127.0.0.1:8000").strip()
# One webhook attempt's bound (connect and read), and an SMTP conversation's.
AGENTCONSOLE_NOTIFY_TIMEOUT_S = positive_seconds("AGENTCONSOLE_NOTIFY_TIMEOUT_S", "5")
# Retries wait BACKOFF_S, then twice as long each time, at most BACKOFF_MAX_S; after
# MAX_ATTEMPTS attempts a delivery has failed.
AGENTCONSOLE_NOTIFY_BACKOFF_S = positive_seconds("AGENTCONSOLE_NOTIFY_BACKOFF_S", "30")
AGENTCONSOLE_NOTIFY_BACKOFF_MAX_S = positive_seconds("AGENTCONSOLE_NOTIFY_BACKOFF_MAX_S", "3600")
AGENTCONSOLE_NOTIFY_MAX_ATTEMPTS = max(
    1, int(os.environ.get("AGENTCONSOLE_NOTIFY_MAX_ATTEMPTS", "6"))
)
# How often beat picks up due retries and outbox rows whose message was lost.
AGENTCONSOLE_NOTIFY_INTERVAL_S = positive_seconds("AGENTCONSOLE_NOTIFY_INTERVAL_S", "15")
NOTIFY_BEAT: dict[str, Any] = {
    "task": "notify.deliver",
    "schedule": AGENTCONSOLE_NOTIFY_INTERVAL_S,
    # One pickup nobody took within an interval expires unrun: the next one does its work.
    "options": {"expires": AGENTCONSOLE_NOTIFY_INTERVAL_S},
}
# The e-mails' sender.
AGENTCONSOLE_NOTIFY_FROM = os.environ.get("AGENTCONSOLE_NOTIFY_FROM", "agentconsole@localhost")

# Django's mail backend: SMTP (EMAIL_HOST ...) unless EMAIL_BACKEND names another; with DEBUG on
# and none named, the console backend (the worker prints the e-mail: nothing leaves).
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND") or (
    "django.core.mail.backends.console.EmailBackend"
    if _on("DEBUG", "1")
    else "django.core.mail.backends.smtp.EmailBackend"
)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _on("EMAIL_USE_TLS", "0")
EMAIL_TIMEOUT = AGENTCONSOLE_NOTIFY_TIMEOUT_S
