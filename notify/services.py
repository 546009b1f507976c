"""Writes of notifications: the outbox row, subscriptions, the fan-out and every delivery
attempt. Nothing else writes these rows.

1. ``notification_record`` runs inside the transaction that creates a confirmation or a handoff
   (runs.orm.writers): the outbox row commits with the item or not at all.
2. After that commit the run store rings the doorbell (``notify.tasks.enqueue_deliver``), and
   the periodic task picks up whatever a lost ring left (``CELERY_BEAT_SCHEDULE``).
3. ``notifications_fan_out`` turns each new outbox row into one delivery per matching
   subscription, once (a compare-and-set on ``fanned_out_at``).
4. ``deliveries_send_due`` takes each due delivery by compare-and-set (intent before effect:
   the attempt is counted and the row pushed forward by a lease before anything is sent), sends
   it outside any transaction, then records the outcome by compare-and-set.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from notify import delivery as transport
from notify.domain import rules
from notify.domain.rules import DeliveryStatus, Event, EventKind, Filter, TargetKind
from notify.models import Delivery, Notification, Subscription
from policy.domain.errors import NotFound


def notification_record(
    *,
    kind: EventKind,
    item_id: str,
    run_id: str,
    roles: Sequence[str],
    link_path: str,
    profile: Any,
    tool_name: str = "",
) -> None:
    """The outbox row of a new item, in the caller's transaction (the one creating the item).

    ``profile`` is the run's profile name, or an expression that reads it from the run row in
    this same INSERT (the run store's way: no extra round trip in a step's commit). No argument
    value, goal or secret is a parameter here: what a notification can say is fixed by this
    signature."""
    Notification.objects.create(
        kind=kind.value,
        item_id=item_id,
        run_id=run_id,
        tool_name=tool_name[:128],
        profile=profile,
        roles=list(roles),
        link_path=link_path,
        created_at=timezone.now(),
    )


def subscription_create(
    *,
    kind: str,
    events: Collection[str],
    url: str = "",
    secret: str = "",
    email: str = "",
    role: str = "",
    profile: str = "",
    known_profiles: Collection[str] = (),
    by: Any = None,
    now: datetime | None = None,
) -> Subscription:
    """A checked subscription (``rules``' codes on bad input; nothing written then)."""
    if kind == TargetKind.WEBHOOK.value:
        url, secret, email = rules.check_webhook_url(url), rules.check_secret(secret), ""
    elif kind == TargetKind.EMAIL.value:
        url, secret, email = "", "", rules.check_email(email)
    else:
        raise rules.SubscriptionInvalid("Choose webhook or e-mail.", code="NOTIFY_KIND_INVALID")
    if profile and profile not in known_profiles:
        raise rules.SubscriptionInvalid(
            f"No profile is named {profile[:63]!r}.", code="NOTIFY_PROFILE_UNKNOWN"
        )
    return Subscription.objects.create(
        kind=kind,
        url=url,
        secret=secret,
        email=email,
        events=rules.check_events(events),
        role=rules.check_role(role),
        profile=profile,
        created_by=by if getattr(by, "pk", None) else None,
        created_at=now or timezone.now(),
    )


def subscription_remove(*, subscription_id: int, now: datetime | None = None) -> None:
    """Removed: it matches nothing from now on and its pending deliveries are cancelled. Its
    rows stay, so the delivery log still names it. (A delivery a worker took just before is
    sent; its outcome then finds it cancelled and leaves it so.)"""
    now = now or timezone.now()
    with transaction.atomic():
        n = Subscription.objects.filter(pk=subscription_id, removed_at__isnull=True).update(
            removed_at=now
        )
        if n != 1:
            raise NotFound("no such subscription", subscription_id=subscription_id)
        Delivery.objects.filter(
            subscription_id=subscription_id, status=DeliveryStatus.PENDING.value
        ).update(status=DeliveryStatus.CANCELLED.value)


def notifications_fan_out(*, now: datetime, limit: int = 200) -> int:
    """One delivery per matching live subscription for each outbox row not fanned out yet;
    the number of deliveries made. Two workers at once: each row's compare-and-set lets one
    of them fan it out, the other skips it."""
    pending = list(Notification.objects.filter(fanned_out_at__isnull=True).order_by("id")[:limit])
    if not pending:
        return 0
    live = list(Subscription.objects.filter(removed_at__isnull=True))
    made = 0
    for row in pending:
        event = event_of(row, public_url="")
        chosen = [
            s
            for s in live
            if s.created_at <= row.created_at
            and rules.matches(Filter(s.events, s.role, s.profile), event)
        ]
        with transaction.atomic():
            won = Notification.objects.filter(pk=row.pk, fanned_out_at__isnull=True).update(
                fanned_out_at=now
            )
            if won != 1:
                continue  # another worker fanned it out
            Delivery.objects.bulk_create(
                Delivery(notification=row, subscription=s, next_attempt_at=now, created_at=now)
                for s in chosen
            )
        made += len(chosen)
    return made


def event_of(row: Notification, *, public_url: str) -> Event:
    return Event(
        kind=row.kind,
        item_id=row.item_id,
        run_id=row.run_id,
        tool_name=row.tool_name,
        profile=row.profile,
        roles=tuple(row.roles),
        link=public_url.rstrip("/") + row.link_path,
        created=row.created_at,
    )


@dataclass(frozen=True)
class DeliveryConfig:
    public_url: str
    timeout_s: float
    backoff: rules.Backoff
    sender: str
    # How long a taken delivery is not due again: past it, a worker that died mid-attempt
    # leaves it to the next pickup (the receiver may then see it twice: delivery ids repeat).
    lease_s: float = 60.0

    @classmethod
    def from_settings(cls) -> DeliveryConfig:
        return cls(
            public_url=settings.AGENTCONSOLE_PUBLIC_URL,
            timeout_s=settings.AGENTCONSOLE_NOTIFY_TIMEOUT_S,
            backoff=rules.Backoff(
                base_s=settings.AGENTCONSOLE_NOTIFY_BACKOFF_S,
                cap_s=settings.AGENTCONSOLE_NOTIFY_BACKOFF_MAX_S,
                max_attempts=settings.AGENTCONSOLE_NOTIFY_MAX_ATTEMPTS,
            ),
            sender=settings.AGENTCONSOLE_NOTIFY_FROM,
            lease_s=max(60.0, 4 * settings.AGENTCONSOLE_NOTIFY_TIMEOUT_S),
        )


def deliveries_send_due(*, now: datetime, config: DeliveryConfig, limit: int = 20) -> int:
    """Send up to ``limit`` deliveries due at ``now``; the number attempted."""
    due = list(
        Delivery.objects.select_related("notification", "subscription")
        .filter(status=DeliveryStatus.PENDING.value, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")[:limit]
    )
    attempted = 0
    for d in due:
        if d.subscription.removed_at is not None:
            # Fanned out while its subscription was being removed: owed to nobody now.
            Delivery.objects.filter(pk=d.pk, status=DeliveryStatus.PENDING.value).update(
                status=DeliveryStatus.CANCELLED.value
            )
            continue
        if not _take(d, now=now, config=config):
            continue  # another worker took it, or it was cancelled meanwhile
        attempted += 1
        outcome = _send(d, now=now, config=config)
        _record(d, outcome, now=now, config=config)
    return attempted


def _take(d: Delivery, *, now: datetime, config: DeliveryConfig) -> bool:
    # Intent before effect: the attempt is counted, and the row is not due again until the
    # lease passes, before anything leaves. The race: two workers read the same due row; the
    # condition on ``attempts`` lets exactly one of them update it.
    n = Delivery.objects.filter(
        pk=d.pk,
        status=DeliveryStatus.PENDING.value,
        attempts=d.attempts,
        next_attempt_at__lte=now,
        subscription__removed_at__isnull=True,
    ).update(
        attempts=F("attempts") + 1,
        last_attempt_at=now,
        next_attempt_at=now + timedelta(seconds=config.lease_s),
    )
    if n == 1:
        d.attempts += 1
    return n == 1


def _send(d: Delivery, *, now: datetime, config: DeliveryConfig) -> transport.Outcome:
    sub = d.subscription
    event = event_of(d.notification, public_url=config.public_url)
    if sub.kind == TargetKind.WEBHOOK.value:
        return transport.post_webhook(
            url=sub.url,
            secret=sub.secret,
            body=rules.payload(event, delivery_id=d.pk),
            event=event.kind,
            delivery_id=d.pk,
            timestamp=int(now.timestamp()),
            timeout_s=config.timeout_s,
        )
    subject, body = rules.mail(event)
    return transport.send_email(address=sub.email, subject=subject, body=body, sender=config.sender)


def _record(
    d: Delivery, outcome: transport.Outcome, *, now: datetime, config: DeliveryConfig
) -> None:
    """The attempt's outcome, on the row this worker took (its ``attempts``); a row cancelled
    meanwhile stays cancelled."""
    values: dict[str, Any] = {"last_status_code": outcome.status_code, "last_error": outcome.error}
    if outcome.ok:
        values.update(status=DeliveryStatus.DELIVERED.value, delivered_at=now)
    elif config.backoff.exhausted(d.attempts):
        values.update(status=DeliveryStatus.FAILED.value)
    else:
        values.update(next_attempt_at=now + timedelta(seconds=config.backoff.delay_s(d.attempts)))
    Delivery.objects.filter(
        pk=d.pk, attempts=d.attempts, status=DeliveryStatus.PENDING.value
    ).update(**values)


def notifications_deliver(*, now: datetime, config: DeliveryConfig) -> tuple[int, int]:
    """What the task does: fan out the new outbox rows, then send what is due."""
    made = notifications_fan_out(now=now)
    return made, deliveries_send_due(now=now, config=config)
