"""Notifications in the Django admin: read-only (they change only through notify.services and
the Notifications page); a subscription's signing secret is never shown."""

from __future__ import annotations

from django.contrib import admin

from agentconsole.kernel.admin_base import ReadOnlyAdmin
from notify import models as m


@admin.register(m.Subscription)
class SubscriptionAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "url", "email", "role", "profile", "created_at", "removed_at")
    exclude = ("secret",)


@admin.register(m.Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "item_id", "run_id", "tool_name", "profile", "created_at")
    list_filter = ("kind",)


@admin.register(m.Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "id", "notification", "subscription", "status", "attempts", "last_status_code",
        "last_error", "next_attempt_at",
    )  # fmt: skip
    list_filter = ("status",)
