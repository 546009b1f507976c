"""A real Celery worker process for the tests in this folder (STYLE habit 13: correctness tests
of workers use a real worker, not eager mode).

How the worker finds the database: pytest-django has created the test database by the time
``celery_worker`` starts (it depends on ``django_db_setup``), and ``connection.settings_dict``
then names it. The worker gets ``DATABASE_URL`` pointing there: on PostgreSQL the test process's
``DATABASE_URL`` with the database name replaced (``test_<name>``); on SQLite ``sqlite:///`` + the
absolute path of the file the settings reserve for tests (``var/test-db.sqlite3``), which the
fixture checks is a real file, not an in-memory database.

How it finds the broker: the test process's own broker settings, with a queue of its own.
With ``REDIS_URL`` set, the worker uses that Redis database and consumes only a fresh
``agentconsole-test-<hex>`` queue; the test process routes ``runs.advance_run`` to it; every
Redis key or binding naming that queue is deleted at teardown. Without it, the filesystem
transport in a fresh temporary folder (``AGENTCONSOLE_BROKER_DIR`` for the worker; the same
folders set on this process's Celery app for the producer side), so a developer's worker on
``var/broker`` never sees a test task. Were the worker to ignore that variable, the tasks would
sit in the temporary folder and every test here would fail on its bounded wait, log attached.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workers.worker_kit import (
    BASE_DIR,
    READY_TIMEOUT_S,
    Worker,
    producer_routed,
    redis_cleanup,
    stop,
    worker_database_url,
)


@pytest.fixture(scope="module")
def celery_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    queue = f"agentconsole-test-{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "DJANGO_SETTINGS_MODULE": "agentconsole.settings",
        "PYTHONUNBUFFERED": "1",
    }
    from django.conf import settings

    transport_options = None
    if settings.CELERY_BROKER_URL.startswith(("agentfs://", "filesystem://")):
        folder = tmp_path_factory.mktemp("broker")
        # The layout agentconsole/settings.py derives from AGENTCONSOLE_BROKER_DIR.
        transport_options = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
        }
        for path in set(transport_options.values()):
            Path(path).mkdir(parents=True, exist_ok=True)
        env["AGENTCONSOLE_BROKER_DIR"] = str(folder)

    celery = Path(sys.executable).with_name("celery")
    command = [
        str(celery),
        "-A",
        "agentconsole",
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        "2",
        "-l",
        "info",
        "-Q",
        queue,
        "-n",
        f"{queue}@%h",
        # No cluster chatter: this worker must not talk to (or wait for) anyone else's.
        "--without-mingle",
        "--without-gossip",
    ]
    process = subprocess.Popen(
        command,
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    worker = Worker(process, queue)
    reader = threading.Thread(target=worker.read, name="celery-worker-log", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not worker.ready.wait(0.1):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Celery worker did not become ready:\n{worker.log()}")
        with producer_routed(queue, transport_options):
            yield worker
    finally:
        stop(process)
        reader.join(timeout=5)
        if settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
            redis_cleanup(settings.CELERY_BROKER_URL, queue)
