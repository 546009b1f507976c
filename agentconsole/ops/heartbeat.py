"""Worker heartbeats: each worker process says "alive at t" every few seconds; /readyz wants one
recent heartbeat (agentconsole/ops/health.py).

Where: Redis (``REDIS_URL``), one sorted set, member = worker name, score = time; so readiness is
one ZREVRANGE however many workers there are, and a worker on another host counts too. Without
Redis (the embedded deployment: one host) a file per worker under ``var/heartbeats/``. Times are
wall-clock seconds: hosts are assumed NTP-synchronised, and the maximum age (30 s by default) is
far above any sane clock skew. Nothing here is the truth about runs: losing it only makes
/readyz unready until the workers' next beat.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Protocol

import redis
from django.conf import settings

log = logging.getLogger(__name__)

REDIS_KEY = "agentconsole:worker-heartbeats"


class HeartbeatStore(Protocol):
    def beat(self, name: str, now: float) -> None: ...
    def forget(self, name: str) -> None: ...
    def newest(self) -> float | None: ...


class RedisHeartbeats:
    def __init__(self, url: str, *, timeout_s: float = 2.0) -> None:
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def beat(self, name: str, now: float) -> None:
        with self.client.pipeline() as pipe:
            pipe.zadd(REDIS_KEY, {name: now})
            # Workers that stopped without saying so (SIGKILL) drop out after an hour.
            pipe.zremrangebyscore(REDIS_KEY, "-inf", now - 3600)
            pipe.execute()

    def forget(self, name: str) -> None:
        self.client.zrem(REDIS_KEY, name)

    def newest(self) -> float | None:
        top = self.client.zrevrange(REDIS_KEY, 0, 0, withscores=True)
        return float(top[0][1]) if top else None


class FileHeartbeats:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, name: str) -> Path:
        return self.folder / name.replace("/", "_")

    def beat(self, name: str, now: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(name)
        path.touch()
        # The file's own time is the beat: nothing to parse, written atomically by the kernel.
        os.utime(path, (now, now))

    def forget(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)

    def newest(self) -> float | None:
        if not self.folder.is_dir():
            return None
        times = [p.stat().st_mtime for p in self.folder.iterdir() if p.is_file()]
        return max(times, default=None)


def store(*, timeout_s: float = 2.0) -> HeartbeatStore:
    if settings.REDIS_URL:
        return RedisHeartbeats(settings.REDIS_URL, timeout_s=timeout_s)
    return FileHeartbeats(settings.VAR_DIR / "heartbeats")


class HeartbeatThread:
    """Beats every ``interval_s`` from a daemon thread of the worker's main process, until
    ``stop``. A beat that fails (Redis away) is logged and retried at the next tick: the
    heartbeat is what tells readiness that the worker is cut off, so it must not die of it."""

    def __init__(self, *, name: str, beats: HeartbeatStore, interval_s: float) -> None:
        self.name = name
        self.beats = beats
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._beat()
        self._thread.start()

    def _beat(self) -> None:
        try:
            self.beats.beat(self.name, time.time())
        except Exception as exc:
            log.warning("worker heartbeat failed: %s", exc.__class__.__name__)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s + 1)
        try:
            self.beats.forget(self.name)
        except Exception as exc:
            log.warning("could not remove the worker heartbeat: %s", exc.__class__.__name__)
