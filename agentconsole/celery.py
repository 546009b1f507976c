"""The Celery application; configuration comes from Django settings prefixed ``CELERY_``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")

app = Celery("agentconsole")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
