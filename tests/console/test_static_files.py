"""Static files on a development setup (DEBUG=1, no ``collectstatic``): WhiteNoise serves them
straight from static/ and the apps' folders, looking each one up when it is asked for. Building
a middleware chain lists no file: Django's test client builds a chain per client, and listing the
finders' ~180 files took 28 ms of CPU each time (a quarter of the API tests' time). Production
(DEBUG=0) serves only what ``collectstatic`` wrote: tests/production/test_production_stack.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from whitenoise.middleware import WhiteNoiseMiddleware

ROOT = Path(__file__).resolve().parents[2]


def _body(path: str) -> bytes:
    response = Client().get(path)
    assert response.status_code == 200, path
    return b"".join(response.streaming_content)


def test_our_files_and_the_apps_files_are_served_without_collectstatic() -> None:
    assert (
        _body("/static/console/console.css") == (ROOT / "static/console/console.css").read_bytes()
    )
    assert b"body" in _body("/static/admin/css/base.css")  # django.contrib.admin's own
    assert Client().get("/static/console/no-such-file.css").status_code == 404


def test_building_a_middleware_chain_lists_no_static_file(monkeypatch: pytest.MonkeyPatch) -> None:
    listed: list[object] = []
    monkeypatch.setattr(
        WhiteNoiseMiddleware, "add_files_from_finders", lambda self: listed.append(self)
    )
    assert Client().get("/healthz").status_code == 200
    assert listed == []
