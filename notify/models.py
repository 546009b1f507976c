"""Notifications (issue 24 item 4): who wants to hear, what happened, each delivery's fate.

- ``Subscription``: a webhook (URL + signing secret) or an e-mail address, with the events,
  role and profile it wants. Removed ones stay (``removed_at``): the delivery log names them.
- ``Notification``: the outbox. One row per new confirmation or handoff, written by
  ``notify.services.notification_record`` in the very transaction that creates the item
  (runs.orm.writers), so an item that rolled back has none and an item that committed always has
  one, whatever happens to a worker after.
- ``Delivery``: one notification to one subscription, with its attempts, when it is due next
  and how the last attempt ended. Only ``notify.services`` writes these rows.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from notify.domain.rules import DeliveryStatus, EventKind, TargetKind


class Subscription(models.Model):
    kind = models.CharField(max_length=16, choices=[(k.value, k.value) for k in TargetKind])
    url = models.CharField(max_length=2000, blank=True, default="")
    # The HMAC key the receiver shares. Never shown again after it is set, never logged.
    secret = models.CharField(max_length=256, blank=True, default="")
    email = models.CharField(max_length=320, blank=True, default="")
    events = models.JSONField(default=list)
    role = models.CharField(max_length=16, blank=True, default="")  # "" = any role
    profile = models.CharField(max_length=63, blank=True, default="")  # "" = any profile
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in TargetKind]), name="subscription_kind_valid"
            ),
            # A webhook has its URL and secret, an e-mail its address: never half of either.
            models.CheckConstraint(
                condition=(Q(kind="webhook") & ~Q(url="") & ~Q(secret="") & Q(email=""))
                | (Q(kind="email") & ~Q(email="") & Q(url="") & Q(secret="")),
                name="subscription_target_complete",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.pk}"

    @property
    def target(self) -> str:
        """What the page shows: the URL or the address (never the secret)."""
        return self.url if self.kind == TargetKind.WEBHOOK.value else self.email


class Notification(models.Model):
    kind = models.CharField(max_length=32, choices=[(k.value, k.value) for k in EventKind])
    item_id = models.CharField(max_length=128)
    run_id = models.CharField(max_length=64)
    tool_name = models.CharField(max_length=128, blank=True, default="")
    profile = models.CharField(max_length=63, blank=True, default="")
    roles = models.JSONField(default=list)
    link_path = models.CharField(max_length=256)
    created_at = models.DateTimeField()
    # Set once its deliveries were made (notify.services.notifications_fan_out).
    fanned_out_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=[k.value for k in EventKind]), name="notification_kind_valid"
            ),
        ]
        indexes = [
            # The fan-out's query: notifications not yet fanned out, oldest first.
            models.Index(
                fields=["id"], condition=Q(fanned_out_at__isnull=True), name="notification_unsent"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.item_id}"


class Delivery(models.Model):
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    subscription = models.ForeignKey(
        Subscription, on_delete=models.PROTECT, related_name="deliveries"
    )
    status = models.CharField(
        max_length=16,
        choices=[(s.value, s.value) for s in DeliveryStatus],
        default=DeliveryStatus.PENDING.value,
    )
    attempts = models.PositiveIntegerField(default=0)
    # When it may be tried next. A worker that takes it moves this forward by its lease first,
    # so a worker that dies mid-attempt leaves it due again later, never lost.
    next_attempt_at = models.DateTimeField()
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    # A stable code (notify.delivery: HTTP_STATUS, TIMEOUT, CONNECTION_FAILED, MAIL_FAILED ...).
    last_error = models.CharField(max_length=64, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in DeliveryStatus]),
                name="delivery_status_valid",
            ),
            # A notification reaches a subscription once (a repeated fan-out adds nothing).
            models.UniqueConstraint(
                fields=["notification", "subscription"], name="delivery_once_per_subscription"
            ),
            models.CheckConstraint(
                condition=~Q(status="delivered") | Q(delivered_at__isnull=False),
                name="delivery_delivered_has_time",
            ),
        ]
        indexes = [
            # The sender's query: pending deliveries due now, soonest first.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="delivery_due",
            ),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.status})"
