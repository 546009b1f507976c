"""Celery tasks of notifications: thin (STYLE habit 8). ``notify.deliver`` fans out new outbox
rows and sends what is due; it is enqueued after the commit of a new confirmation or handoff
(the run store's hook, set by agentconsole.wiring) and every ``AGENTCONSOLE_NOTIFY_INTERVAL_S``
by beat, which picks up retries that came due and anything a lost message left."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from notify import services

log = logging.getLogger(__name__)


@shared_task(name="notify.deliver")
def deliver() -> dict[str, int]:
    made, attempted = services.notifications_deliver(
        now=timezone.now(), config=services.DeliveryConfig.from_settings()
    )
    return {"deliveries_made": made, "attempted": attempted}


def enqueue_deliver() -> None:
    """The doorbell: called after a commit that wrote an outbox row. A lost message only
    delays the delivery until the next periodic pickup, so a broker that refuses it must not
    fail the step that committed (this runs in its on-commit hook)."""
    try:
        deliver.apply_async()
    except Exception as exc:
        log.warning("notify.deliver not enqueued: %s", type(exc).__name__)
