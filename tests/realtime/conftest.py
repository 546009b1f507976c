"""Realtime tests: the live trace websocket and the console socket.

Personas: alice (user; owns the runs under test), bob (user; an outsider to alice's runs),
operator (sees every run and the queue counts).

The channel layer is the in-memory one, or Redis when REDIS_URL is set (as on CI), so the
same tests check both deployments.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group


@pytest.fixture
def personas(db):
    users = {}
    for name, role in (("alice", "user"), ("bob", "user"), ("operator", "operator")):
        user = get_user_model().objects.create_user(username=name, password=name)
        # get_or_create: transactional tests flush the groups the migration created.
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        users[name] = user
    return users


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
