"""How a worker wakes the gateway after it recorded a request, and how the gateway listens.

A doorbell, not a queue: the request is in the database, and a gateway that missed the ring
finds it at its next poll (``AGENTCONSOLE_GATEWAY_POLL_S``). With Redis (``REDIS_URL``) the ring
is a PUBLISH on one channel; without it (the embedded deployment) there is no ring and the
gateway polls.
"""

from __future__ import annotations

import asyncio
import logging

import redis
import redis.asyncio as aioredis
from django.conf import settings

log = logging.getLogger(__name__)

CHANNEL = "agentconsole:calls"

_client: redis.Redis | None = None


def ring() -> None:
    """Called after the commit that recorded a request; a failure only costs a poll's delay."""
    global _client
    if not settings.REDIS_URL:
        return
    try:
        if _client is None:
            _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1)
        _client.publish(CHANNEL, b"1")
    except redis.RedisError:
        log.warning("could not ring the gateway; it finds the request at its next poll")


async def listen(wake: asyncio.Event) -> None:
    """Set ``wake`` on every ring, for as long as the gateway runs (reconnecting on errors)."""
    if not settings.REDIS_URL:
        return
    while True:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(CHANNEL)
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        wake.set()
        except (redis.RedisError, OSError):
            log.warning("gateway doorbell lost; polling until it is back")
            await asyncio.sleep(1.0)
        finally:
            await client.aclose()
