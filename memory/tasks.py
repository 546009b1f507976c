"""Celery tasks of the memory app: thin."""

from __future__ import annotations

from celery import shared_task

from memory import services


@shared_task(name="memory.purge_expired")
def purge_expired() -> int:
    return services.preferences_purge_expired()
