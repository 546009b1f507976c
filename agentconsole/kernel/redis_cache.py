"""Django's Redis cache with one client per process, so a request does not open a connection.

Django keeps cache objects per context (``caches`` is an asgiref ``Local``). Under ASGI every
request runs in a context of its own, so each request built a new ``RedisCache``, a new client
and a new connection pool: a TCP connect and the client's hand-shake for each request that
touched the cache (the create rate, the sign-in throttle). Measured in the runs-in-flight bench:
one new Redis connection per ``POST /api/runs/``. Django's own fix is still open (django/django
PR 18459).

Here the client (and so its pools; redis-py's pools are thread-safe and reset after a fork) is
shared by every cache object of the process with the same servers and options. Behaviour is
Django's backend otherwise; ``settings.CACHES`` names this class instead of Django's.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_clients: dict[str, RedisCacheClient] = {}
_lock = threading.Lock()


class SharedRedisCache(RedisCache):
    """``RedisCache`` whose client is the process's one for these servers and options."""

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        servers = re.split("[;,]", server) if isinstance(server, str) else list(server)
        options = dict(params.get("OPTIONS", {}))
        self._shared = (servers, options, repr((servers, sorted(options.items()))))

    @cached_property
    def _cache(self) -> Any:
        servers, options, key = self._shared
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = RedisCacheClient(servers, **options)
        return client
