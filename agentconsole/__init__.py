"""agentconsole project package. The Celery app is loaded with Django so tasks find it."""

from agentconsole.celery import app as celery_app

__all__ = ("celery_app",)
