"""issue 9 item 13: CSRF_TRUSTED_ORIGINS and SECURE_PROXY_SSL_HEADER come from the environment and
reach Django's own CSRF check of an HTTP POST (the websocket applies the same rule:
tests/realtime/test_origins.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
PLANNER = {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]}
CONSOLE = "https://console.example.com"


def test_the_settings_come_from_the_environment() -> None:
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.CSRF_TRUSTED_ORIGINS, s.SECURE_PROXY_SSL_HEADER]))"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentconsole.settings",
        "CSRF_TRUSTED_ORIGINS": f"{CONSOLE}, https://other.example.com:8443",
        "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    origins, header = json.loads(out.stdout.strip().splitlines()[-1])
    assert origins == [CONSOLE, "https://other.example.com:8443"]
    assert header == ["HTTP_X_FORWARDED_PROTO", "https"]


def _post_behind_the_proxy(people: kit.People) -> Any:
    """A browser on https://console.example.com; the proxy terminates TLS, keeps the Host and
    sets X-Forwarded-Proto: https; Django sees plain http."""
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username=people.alice.username, password=kit.PASSWORD)
    client.get("/admin/login/", HTTP_HOST="console.example.com")
    token = client.cookies["csrftoken"].value
    return client.post(
        "/api/runs/",
        {"goal": "g", "planner": PLANNER},
        format="json",
        HTTP_X_CSRFTOKEN=token,
        HTTP_ORIGIN=CONSOLE,
        HTTP_HOST="console.example.com",
        HTTP_X_FORWARDED_PROTO="https",
    )


def test_a_post_behind_a_tls_proxy(people: kit.People, settings: Any) -> None:
    """issue 9 item 13: without either setting the https page's POST is refused as cross-origin;
    the proxy header or the trusted origin lets it through."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "console.example.com"]
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.SECURE_PROXY_SSL_HEADER = None
    refused = kit.assert_error(_post_behind_the_proxy(people), 403, kit.PERMISSION_DENIED)
    assert "CSRF" in refused["message"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    kit.assert_ok(_post_behind_the_proxy(people), 201)
    settings.SECURE_PROXY_SSL_HEADER = None
    settings.CSRF_TRUSTED_ORIGINS = [CONSOLE]
    kit.assert_ok(_post_behind_the_proxy(people), 201)
