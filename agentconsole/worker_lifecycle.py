"""What a worker process does when it starts and stops (connected in agentconsole/celery.py).

Start (``worker_ready``, in the main process): release the leases that dead processes of this
host still hold (a predecessor killed with SIGKILL), then beat every
``AGENTCONSOLE_WORKER_HEARTBEAT_S`` (agentconsole/heartbeat.py) so /readyz sees a worker.

Stop (``worker_shutdown`` after a warm shutdown; at interpreter exit after a cold one, which
Celery ends without that signal; in the main process, after the pool processes ended): stop the
heartbeat and remove it, then release the leases of this host's dead processes: a task stopped
at the end of the shutdown bound leaves its run to the next worker at once (its message went back
to the broker: acks_late), not only after the lease expires.

Each task (in a prefork child, ``worker_process_init``): connections go back to the process's
pool at the task's start and end, instead of the pool being closed (``keep_pool_between_tasks``).
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

from celery import signals
from celery.fixups.django import DjangoFixup
from django.conf import settings
from django.core.cache import close_caches
from django.db import close_old_connections, connections

from agentconsole import heartbeat
from runs.leases import release_dead_local

log = logging.getLogger(__name__)

_beating: heartbeat.HeartbeatThread | None = None
# The main process's pid: a pool process forked later inherits the atexit hook, and must not
# release anything (billiard ends its processes with os._exit, but do not rely on it).
_main_pid: int | None = None


def _release() -> None:
    try:
        release_dead_local()
    except Exception as exc:  # the database away at shutdown: the lease expires by itself
        log.warning("could not release the leases of dead processes: %s", exc.__class__.__name__)
    finally:
        connections.close_all()


def on_worker_ready(sender: Any = None, **_: Any) -> None:
    global _beating, _main_pid  # one heartbeat per worker main process
    _main_pid = os.getpid()
    atexit.register(on_worker_shutdown)
    _release()
    name = getattr(sender, "hostname", None) or "worker"
    _beating = heartbeat.HeartbeatThread(
        name=str(name),
        beats=heartbeat.store(),
        interval_s=settings.AGENTCONSOLE_WORKER_HEARTBEAT_S,
    )
    _beating.start()


def on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    global _beating
    if os.getpid() != _main_pid:
        return
    # Once: after a warm shutdown's signal the exit hook has nothing left to do (and a worker
    # started inside a test process would otherwise release on a dropped test database at exit).
    atexit.unregister(on_worker_shutdown)
    if _beating is not None:
        _beating.stop()
        _beating = None
    _release()


def keep_pool_between_tasks(app: Any) -> None:
    """In a prefork child (``worker_process_init``): hand connections back to the pool at a
    task's start and end, as Django does around a request, instead of closing the pool.

    Celery's Django fixup (5.7) closes the process's whole connection pool before and after every
    task in a prefork child (celery issue 10554): each task, a resumed approval's included,
    then opened a new PostgreSQL connection and started a new pool. The fixup keeps closing the
    pool a child inherits at fork (its ``worker_process_init``); only its per-task handlers are
    replaced here. ``close_old_connections`` returns a pooled connection to the pool, and closes
    one that broke or (without a pool) has outlived ``CONN_MAX_AGE``."""
    for fixup in app._fixups or ():
        if isinstance(fixup, DjangoFixup):
            signals.task_prerun.disconnect(fixup.worker_fixup.on_task_prerun)
            signals.task_postrun.disconnect(fixup.worker_fixup.on_task_postrun)
    signals.task_prerun.connect(_connections_back, weak=False)
    signals.task_postrun.connect(_connections_back, weak=False)


def _connections_back(sender: Any = None, **_: Any) -> None:
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return  # an eager task runs inside its caller's connection and transaction
    close_old_connections()
    close_caches()
