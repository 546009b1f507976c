"""The Celery signals a worker and beat answer, connected from AgentconsoleConfig.ready().

They used to be connected in agentconsole/celery.py, which the apps import (the fault lab sends
with the Celery app): the app's module then led back up to the worker's hooks and through them to
the apps' leases and sweeper (issue 25 item 3: no app imports up into an entry point). Here, in
ops, they are connected with Django, which the worker and beat set up before either sends its
first signal: Celery's Django fixup calls ``django.setup()`` when the loader imports the task
modules (``init_worker``), before ``worker_init`` and ``beat_init`` are sent.

With DEBUG=0, a worker or beat does not start while a demo password works (issue 21 item 12):
``worker_init`` in the worker's main process before it forks its pool, ``beat_init`` before
beat's first tick. Celery logs and swallows a handler's exception, so the refusal is a
SystemExit; so is a worker's refusal of a bad configuration (the tool policy: the checks
tagged ``CONFIGURATION_CHECKS``). Then heartbeat and lease release at start and stop of a worker
(worker_lifecycle.py).
"""

from __future__ import annotations

from celery import signals
from django.core.checks import run_checks

from agentconsole.access import demo_passwords
from agentconsole.celery import app
from agentconsole.ops import worker_lifecycle

# The tag of the configuration checks (agentconsole/checks.py registers them under it).
CONFIGURATION_CHECKS = "agentconsole-configuration"


def connect() -> None:
    signals.worker_init.connect(_worker_init, dispatch_uid="agentconsole-worker-init")
    signals.beat_init.connect(_beat_init, dispatch_uid="agentconsole-beat-init")
    signals.worker_ready.connect(_worker_ready, dispatch_uid="agentconsole-worker-ready")
    signals.worker_shutdown.connect(_worker_shutdown, dispatch_uid="agentconsole-worker-shutdown")
    signals.worker_process_init.connect(
        _worker_process_init, dispatch_uid="agentconsole-worker-process-init"
    )


def _worker_init(sender: object = None, **kwargs: object) -> None:
    _refuse_demo_passwords("the Celery worker")
    _refuse_bad_configuration("the Celery worker")


def _refuse_bad_configuration(entry_point: str) -> None:
    """The checks of the deployment's configuration (``CONFIGURATION`` in agentconsole/checks.py:
    the tool policy), as ``manage.py check`` runs them. Django's other checks stay with that
    command: agentconsole/celery.py turns off Celery's run of them all at each start."""
    errors = [e for e in run_checks(tags=[CONFIGURATION_CHECKS]) if e.is_serious()]
    if errors:
        said = "; ".join(f"{e.id}: {e.msg}" for e in errors)
        raise SystemExit(f"{entry_point} does not start: {said}")


def _beat_init(sender: object = None, **kwargs: object) -> None:
    _refuse_demo_passwords("Celery beat")


def _refuse_demo_passwords(entry_point: str) -> None:
    try:
        demo_passwords.refuse_demo_passwords(entry_point)
    except demo_passwords.DemoPasswordsRefused as exc:
        raise SystemExit(str(exc)) from None


def _worker_ready(sender: object = None, **kwargs: object) -> None:
    worker_lifecycle.on_worker_ready(sender=sender)


def _worker_shutdown(sender: object = None, **kwargs: object) -> None:
    worker_lifecycle.on_worker_shutdown(sender=sender)


def _worker_process_init(**kwargs: object) -> None:
    worker_lifecycle.keep_pool_between_tasks(app)
