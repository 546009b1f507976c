"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

import os

from celery import Celery, signals

from agentconsole.kernel import broker

# "agentfs://": the embedded broker whose messages appear atomically
# (agentconsole/kernel/broker.py).
broker.register()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")

app = Celery("agentconsole")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# With DEBUG=0, a worker or beat does not start while a demo password works (issue 21 item 12):
# worker_init in the worker's main process before it forks its pool, beat_init before beat's
# first tick. Celery logs and swallows a handler's exception, so the refusal is a SystemExit.


@signals.worker_init.connect
def _worker_init(sender: object = None, **kwargs: object) -> None:
    _refuse_demo_passwords("the Celery worker")


@signals.beat_init.connect
def _beat_init(sender: object = None, **kwargs: object) -> None:
    _refuse_demo_passwords("Celery beat")


def _refuse_demo_passwords(entry_point: str) -> None:
    from agentconsole.access import demo_passwords  # import here: models load after Django setup

    try:
        demo_passwords.refuse_demo_passwords(entry_point)
    except demo_passwords.DemoPasswordsRefused as exc:
        raise SystemExit(str(exc)) from None


# Heartbeat and lease release at start and stop of a worker (agentconsole/ops/worker_lifecycle.py).


@signals.worker_ready.connect
def _worker_ready(sender: object = None, **kwargs: object) -> None:
    from agentconsole.ops import worker_lifecycle  # import here: models load after Django setup

    worker_lifecycle.on_worker_ready(sender=sender)


@signals.worker_shutdown.connect
def _worker_shutdown(sender: object = None, **kwargs: object) -> None:
    from agentconsole.ops import worker_lifecycle  # import here: models load after Django setup

    worker_lifecycle.on_worker_shutdown(sender=sender)


@signals.worker_process_init.connect
def _worker_process_init(**kwargs: object) -> None:
    from agentconsole.ops import worker_lifecycle  # import here: models load after Django setup

    worker_lifecycle.keep_pool_between_tasks(app)
