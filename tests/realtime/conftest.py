"""Realtime tests: the live trace websocket and the console socket.

Personas (tests/support/personas.py): alice (user; owns the runs under test), bob (user; an
outsider to alice's runs), operator (sees every run and the queue counts).

The channel layer is the in-memory one, or Redis when REDIS_URL is set (as on CI), so the
same tests check both deployments.
"""

from __future__ import annotations

import pytest

from tests.support.personas import make_user


@pytest.fixture(autouse=True)
def _readers(trace_readers_closed: None) -> None:
    """The trace consumers run in this process (tests/conftest.py: trace_readers_closed)."""


@pytest.fixture
def personas(db):
    roles = {"alice": "user", "bob": "user", "operator": "operator"}
    return {name: make_user(name, role, password=name) for name, role in roles.items()}


@pytest.fixture(autouse=True)
def _fresh_channel_layer(settings):
    """A Redis layer with a prefix per test, so no message crosses tests; in-memory otherwise."""
    import uuid

    from channels.layers import channel_layers

    layers = settings.CHANNEL_LAYERS
    if layers["default"]["BACKEND"].endswith("RedisChannelLayer"):
        config = dict(layers["default"]["CONFIG"])
        config["prefix"] = f"test-{uuid.uuid4().hex[:8]}"
        settings.CHANNEL_LAYERS = {"default": {**layers["default"], "CONFIG": config}}
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()
