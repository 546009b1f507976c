import hashlib
import re
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from policy.domain.secrets.redaction import configure


class PolicyConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "policy"

    def ready(self) -> None:
        configure_secret_scanner()
        setting_changed.connect(_reconfigure)


def configure_secret_scanner() -> None:
    """Install the process-wide secret scanner from settings (issue 9 item 12).

    The tag's hash is keyed with a key derived from SECRET_KEY: every process of a deployment
    tags one secret alike, and nobody without the key can test guesses against a stored tag.
    """
    patterns = list(getattr(settings, "AGENTCONSOLE_SECRET_PATTERNS", []))
    key = hashlib.sha256(b"agentconsole.redaction:" + settings.SECRET_KEY.encode()).digest()
    try:
        configure(patterns, key=key)
    except (re.error, ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"AGENTCONSOLE_SECRET_PATTERNS: {exc}") from exc


def _reconfigure(*, setting: str, **kwargs: Any) -> None:
    if setting in ("AGENTCONSOLE_SECRET_PATTERNS", "SECRET_KEY"):
        configure_secret_scanner()
