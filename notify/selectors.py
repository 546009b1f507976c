"""Reads of notifications: the subscriptions and the delivery log, as the console shows them."""

from __future__ import annotations

from django.db.models import QuerySet

from notify.models import Delivery, Subscription

LOG_SIZE = 50


def subscriptions_live() -> QuerySet[Subscription]:
    return (
        Subscription.objects.select_related("created_by")
        .filter(removed_at__isnull=True)
        .order_by("-id")
    )


def deliveries_recent(*, limit: int = LOG_SIZE) -> list[Delivery]:
    """The newest deliveries, each with its notification and subscription (one query)."""
    return list(
        Delivery.objects.select_related("notification", "subscription").order_by("-id")[:limit]
    )
