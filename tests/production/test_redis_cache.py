"""The cache opens one Redis connection per process, not one per request.

Django keeps a cache object per context, and under ASGI each request is a context of its own:
with Django's ``RedisCache`` every request that counted a create or a sign-in built a client
and connected to Redis again (agentconsole/kernel/redis_cache.py). Here twenty cache objects,
each as a request would get it (made in its own thread), stay alive together and use the cache;
Redis's own ``CLIENT LIST`` says how many connections they opened. Needs Redis (``REDIS_URL``).
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import pytest
import redis
from django.core.cache.backends.redis import RedisCache

from agentconsole.kernel.redis_cache import SharedRedisCache

URL = os.environ.get("REDIS_URL", "")
pytestmark = pytest.mark.skipif(not URL, reason="needs Redis: set REDIS_URL")


def connections_opened(backend: type[RedisCache]) -> int:
    name = f"cache-test-{uuid.uuid4().hex[:12]}"
    params = {"OPTIONS": {"client_name": name}, "KEY_PREFIX": name}
    kept: list[Any] = []

    def request(i: int) -> None:
        cache = backend(URL, params)  # what caches["default"] is in a new request's context
        cache.add(f"window:{i}", 0, 60)
        cache.incr(f"window:{i}")
        assert cache.get(f"window:{i}") == 1
        kept.append(cache)

    for i in range(20):
        thread = threading.Thread(target=request, args=(i,))
        thread.start()
        thread.join()
    listed = redis.Redis.from_url(URL).client_list()
    opened = sum(1 for c in listed if c.get("name") == name)
    kept[0].delete_many([f"window:{i}" for i in range(20)])
    for cache in kept:
        cache.close()
    return opened


def test_twenty_requests_share_one_connection() -> None:
    assert connections_opened(SharedRedisCache) == 1


def test_djangos_backend_opens_one_per_request() -> None:
    # The reason for the class: without it, each request's cache object connects again.
    assert connections_opened(RedisCache) == 20
