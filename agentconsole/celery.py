"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

import os

from celery import Celery, signals

from agentconsole import broker

# "agentfs://": the embedded broker whose messages appear atomically (agentconsole/broker.py).
broker.register()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")

app = Celery("agentconsole")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Heartbeat and lease release at start and stop of a worker (agentconsole/worker_lifecycle.py).


@signals.worker_ready.connect
def _worker_ready(sender: object = None, **kwargs: object) -> None:
    from agentconsole import worker_lifecycle  # import here: models load after Django setup

    worker_lifecycle.on_worker_ready(sender=sender)


@signals.worker_shutdown.connect
def _worker_shutdown(sender: object = None, **kwargs: object) -> None:
    from agentconsole import worker_lifecycle  # import here: models load after Django setup

    worker_lifecycle.on_worker_shutdown(sender=sender)


@signals.worker_process_init.connect
def _worker_process_init(**kwargs: object) -> None:
    from agentconsole import worker_lifecycle  # import here: models load after Django setup

    worker_lifecycle.keep_pool_between_tasks(app)
