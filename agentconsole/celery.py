"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

import os

from celery import Celery

from agentconsole import broker

# "agentfs://": the embedded broker whose messages appear atomically (agentconsole/broker.py).
broker.register()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")

app = Celery("agentconsole")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
