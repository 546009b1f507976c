"""Where a browser test's live console lives: a private database, a queue, a scratch folder and
the processes started there, all gone afterwards. The browser tests' console (``conftest.py``)
and the first hour's production install (``pages/test_first_hour.py``) both stand on it."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.support.harness import Context, private_database
from bench.support.stack import _env, _start_daphne, _start_workers, forget_queue
from tests.browser.browser_kit import ROOT, missing
from tests.support.session import template_db


@dataclass
class Place:
    ctx: Context
    queue: str
    scratch: Path
    prefix: str
    processes: contextlib.ExitStack
    migrated: bool  # its database is a copy of the run's migrated template

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of its processes: ``extra`` over the queue, the run output folder
        and, without Redis, a broker folder of its own."""
        own = {
            "AGENTCONSOLE_QUEUE": self.queue,
            "AGENTCONSOLE_RUN_OUTPUT_ROOT": str(self.scratch / "run-output"),
        }
        if not self.ctx.redis_url:
            own["AGENTCONSOLE_BROKER_DIR"] = str(self.scratch / "broker")
        return _env(self.ctx, **own, **extra)

    def serve(self, env: dict[str, str]) -> str:
        """A Celery worker on its queue and daphne; the console's URL."""
        _start_workers(self.processes, env, self.queue, [f"{self.prefix}-{self.queue}"])
        return f"http://127.0.0.1:{_start_daphne(self.processes, env)}"


@contextlib.contextmanager
def place(prefix: str, *, migrated: bool) -> Iterator[Place]:
    """A place named ``prefix``; skips where no Chromium is found. ``migrated``: on PostgreSQL
    the database is a copy of the run's migrated one (tests/support/session/template_db.py),
    else it starts empty."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    base = os.environ.get("DATABASE_URL") or f"sqlite:///{ROOT / 'var' / 'browser.sqlite3'}"
    template = template_db.ensure(base) if migrated and template_db.on_postgres(base) else None
    database_url, drop = private_database(base, prefix=prefix, template=template)
    queue = f"{prefix}_{uuid.uuid4().hex[:8]}"
    scratch = Path(tempfile.mkdtemp(prefix=f"agentconsole-{prefix}-"))
    ctx = Context(database_url, os.environ.get("REDIS_URL", ""), "", time.monotonic() + 3600)
    processes = contextlib.ExitStack()
    try:
        yield Place(ctx, queue, scratch, prefix, processes, migrated=template is not None)
    finally:
        processes.close()
        if ctx.redis_url:
            forget_queue(ctx.redis_url, queue)
        drop()
        shutil.rmtree(scratch, ignore_errors=True)
