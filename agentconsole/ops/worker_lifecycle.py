"""What a worker process does when it starts and stops (connected by celery_signals.py).

Start (``worker_ready``, in the main process): beat every ``AGENTCONSOLE_WORKER_HEARTBEAT_S``
(agentconsole/ops/heartbeat.py) so /readyz sees a worker, and start the reaper: at once and every
``AGENTCONSOLE_REAP_INTERVAL_S``, the runs held by processes of this host that no longer exist (a
predecessor killed with SIGKILL, a pool process the kernel killed, a sibling worker's) are sent on
at once to a queue this worker consumes (``runs.engine.sweeper.recover_dead_local``). The main
process does it, not a task: every pool process may be busy with steps while a run waits.

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
import threading
from typing import Any

from celery import current_app, signals
from celery.fixups.django import DjangoFixup
from django.conf import settings
from django.core.cache import close_caches
from django.db import close_old_connections, connections

from agentconsole.ops import heartbeat
from runs.engine.leases import release_dead_local
from runs.engine.sweeper import recover_dead_local

log = logging.getLogger(__name__)

_beating: heartbeat.HeartbeatThread | None = None
_reaper: Reaper | None = None
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


class Reaper:
    """Calls ``recover_dead_local`` every ``interval_s`` from a daemon thread of the worker's
    main process, until ``stop``. A round that fails (the database away) is logged and tried
    again at the next tick; until then the leases lapse by their expiry, as without it."""

    def __init__(self, *, queue: str | None, interval_s: float) -> None:
        self.queue = queue
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        # The first round at once: a predecessor on this host killed with SIGKILL.
        while True:
            try:
                recover_dead_local(queue=self.queue)
            except Exception as exc:
                log.warning("could not recover dead processes' runs: %s", exc.__class__.__name__)
            finally:
                connections.close_all()  # back to the pool between rounds
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval_s + 5)


def recovery_queue() -> str | None:
    """Where the reaper sends a run: the control queue if this worker consumes it (ahead of
    the backlog), else the first queue it consumes (a worker started with ``-Q`` naming other
    queues, as the tests' workers are, must find the run itself)."""
    consumed = list(current_app.amqp.queues.consume_from or ())
    if settings.AGENTCONSOLE_CONTROL_QUEUE in consumed:
        return str(settings.AGENTCONSOLE_CONTROL_QUEUE)
    return consumed[0] if consumed else None


# Pools a forked child inherited from its parent: kept, never used nor closed (see below).
_inherited_pools: list[Any] = []
_forget_registered = False


def forget_inherited_pools() -> None:
    """In a child just forked (``os.register_at_fork``): set the parent's PostgreSQL pools
    aside, untouched; the child opens its own on first use.

    The reaper uses the database from the main process, so the pool processes it forks later
    (a replacement for one that died) inherit its pool: its sockets, and its lock, which the
    reaper may hold at that instant. Celery's fixup closes the inherited pool in the child
    (``worker_process_init``): closing sends PostgreSQL a Terminate on the parent's sockets,
    ending the parent's sessions, and a lock held at the fork would never be released there.
    Runs before any of the child's own code, whatever the order of Celery's signal handlers.
    """
    try:
        # import here: psycopg may be absent (SQLite only), and then there is no pool
        from django.db.backends.postgresql.base import DatabaseWrapper
    except ImportError:  # no psycopg installed: no pool to inherit (SQLite)
        return
    # Django keeps each alias's pool in this class attribute (5.1+); no public way to forget one.
    pools: dict[str, Any] = getattr(DatabaseWrapper, "_connection_pools", {})
    _inherited_pools.extend(pools.values())
    pools.clear()


def on_worker_ready(sender: Any = None, **_: Any) -> None:
    global _beating, _main_pid, _reaper  # one heartbeat and one reaper per worker main process
    global _forget_registered  # one at-fork hook per process (it cannot be unregistered)
    _main_pid = os.getpid()
    atexit.register(on_worker_shutdown)
    if not _forget_registered:
        os.register_at_fork(after_in_child=forget_inherited_pools)
        _forget_registered = True
    if settings.AGENTCONSOLE_REAP_INTERVAL_S > 0:
        _reaper = Reaper(queue=recovery_queue(), interval_s=settings.AGENTCONSOLE_REAP_INTERVAL_S)
        _reaper.start()
    else:  # off: a predecessor's runs still lapse at once; the sweep sends them on
        _release()
    name = getattr(sender, "hostname", None) or "worker"
    _beating = heartbeat.HeartbeatThread(
        name=str(name),
        beats=heartbeat.store(),
        interval_s=settings.AGENTCONSOLE_WORKER_HEARTBEAT_S,
    )
    _beating.start()


def on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    global _beating, _reaper
    if os.getpid() != _main_pid:
        return
    # Once: after a warm shutdown's signal the exit hook has nothing left to do (and a worker
    # started inside a test process would otherwise release on a dropped test database at exit).
    atexit.unregister(on_worker_shutdown)
    if _reaper is not None:
        _reaper.stop()
        _reaper = None
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
