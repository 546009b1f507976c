"""What a notification says and to whom it goes: plain rules, no Django.

An *event* is a new item a person must act on: a confirmation waiting for a decision, or a
handoff opened for a reviewer. It names the item, its run, the tool (for a confirmation), the
run's profile and the roles that act on it, and nothing else: never an argument value, the
run's goal or a secret (the payload is built here from those fields only, so nothing else can
slip in).
"""

from __future__ import annotations

import enum
import ipaddress
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from policy.domain.errors import DomainError


class EventKind(enum.StrEnum):
    CONFIRMATION_WAITING = "confirmation.waiting"
    HANDOFF_OPENED = "handoff.opened"


class TargetKind(enum.StrEnum):
    WEBHOOK = "webhook"
    EMAIL = "email"


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # max attempts spent
    CANCELLED = "cancelled"  # its subscription was removed first


# The roles a subscription may filter on: who acts on the item (agentconsole.kernel.roles' names).
OPERATOR, REVIEWER, USER = "operator", "reviewer", "user"
ROLES = (OPERATOR, REVIEWER, USER)

# Who acts on a confirmation, by its approver rule (policy.domain.confirmation.approvers): the run's
# own person is a "user", an independent approver an "operator".
_CONFIRMATION_ROLES = {
    "owner_or_operator": (OPERATOR, USER),
    "owner": (USER,),
    "operator": (OPERATOR,),
    "four_eyes": (OPERATOR, USER),
}


def roles_for_confirmation(approvers: str) -> tuple[str, ...]:
    return _CONFIRMATION_ROLES.get(approvers, (OPERATOR, USER))


def roles_for_handoff() -> tuple[str, ...]:
    return (REVIEWER,)


class SubscriptionInvalid(DomainError):
    code = "NOTIFY_SUBSCRIPTION_INVALID"
    http_status = 400


MAX_URL = 2000
MIN_SECRET = 16
MAX_SECRET = 256
# An address as the mail backend takes it; not a full RFC 5322 parser, on purpose: one
# address, no display name, no comma, no line break (a header injection needs one).
_EMAIL = re.compile(r"^[^@\s,;<>\"']{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}$")


def check_webhook_url(url: str) -> str:
    """``url`` if a webhook may be sent to it: http or https, a host, no user name or password
    (they would be stored, shown and sent in clear), no fragment. Which hosts are allowed is the
    operator's configuration (docs/notifications.md): the console does not second-guess it."""
    url = url.strip()
    # ASCII only: an international name goes as its punycode and a path percent-encoded (the
    # way it travels anyway); nothing unprintable, no lone surrogate the database would refuse.
    if not url or len(url) > MAX_URL or not (url.isascii() and url.isprintable()) or " " in url:
        raise SubscriptionInvalid(
            "Give the receiver's full URL, in ASCII (punycode, percent-encoding).",
            code="NOTIFY_URL_INVALID",
        )
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError:
        raise SubscriptionInvalid("This URL cannot be read.", code="NOTIFY_URL_INVALID") from None
    if parts.scheme not in ("http", "https"):
        raise SubscriptionInvalid(
            "Only http:// and https:// URLs are accepted.", code="NOTIFY_URL_SCHEME"
        )
    if "@" in parts.netloc:
        raise SubscriptionInvalid(
            "A URL with a user name or password is refused: put a secret in the signing "
            "secret field instead.",
            code="NOTIFY_URL_USERINFO",
        )
    if not parts.hostname or parts.fragment or port == 0:
        raise SubscriptionInvalid("This URL names no host to send to.", code="NOTIFY_URL_INVALID")
    return url


def check_secret(secret: str) -> str:
    printable = secret.isascii() and secret.isprintable() and " " not in secret
    if not MIN_SECRET <= len(secret) <= MAX_SECRET or not printable:
        raise SubscriptionInvalid(
            f"The signing secret is {MIN_SECRET} to {MAX_SECRET} printable ASCII characters, "
            "no spaces.",
            code="NOTIFY_SECRET_INVALID",
        )
    return secret


def check_email(address: str) -> str:
    address = address.strip()
    if not address.isascii() or not _EMAIL.match(address):
        raise SubscriptionInvalid("Give one e-mail address.", code="NOTIFY_EMAIL_INVALID")
    return address


def check_events(kinds: Collection[str]) -> list[str]:
    known = {k.value for k in EventKind}
    if not kinds or not set(kinds) <= known:
        raise SubscriptionInvalid("Choose at least one event.", code="NOTIFY_EVENTS_INVALID")
    return sorted(set(kinds))


def check_role(role: str) -> str:
    if role and role not in ROLES:
        raise SubscriptionInvalid(f"Unknown role {role!r}.", code="NOTIFY_ROLE_INVALID")
    return role


def is_loopback(url: str) -> bool:
    """Whether ``url`` points at this machine (shown on the page as a hint, never a refusal)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Event:
    """What a notification tells: the fields of the payload, nothing more."""

    kind: str
    item_id: str
    run_id: str
    tool_name: str
    profile: str
    roles: Sequence[str]
    link: str
    created: datetime


@dataclass(frozen=True)
class Filter:
    events: Collection[str]
    role: str  # "" = any
    profile: str  # "" = any


def matches(f: Filter, event: Event) -> bool:
    return (
        event.kind in f.events
        and (not f.role or f.role in event.roles)
        and (not f.profile or f.profile == event.profile)
    )


def payload(event: Event, *, delivery_id: int) -> bytes:
    """The webhook body: compact JSON with sorted keys, so its bytes are what was signed."""
    body: dict[str, Any] = {
        "event": event.kind,
        "delivery_id": delivery_id,
        "item_id": event.item_id,
        "run_id": event.run_id,
        "tool_name": event.tool_name,
        "profile": event.profile,
        "link": event.link,
        "created": event.created.isoformat(),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


_TITLES = {
    EventKind.CONFIRMATION_WAITING.value: "A confirmation is waiting for a decision",
    EventKind.HANDOFF_OPENED.value: "A run was handed to a person",
}


def mail(event: Event) -> tuple[str, str]:
    """The e-mail's subject and body: what happened, in fixed words, and the link. Nothing
    from the run itself (no tool, goal or argument): the console shows it to who may see it."""
    title = _TITLES.get(event.kind, "Something needs a person")
    body = f"{title}.\n\nOpen it in the console (sign-in required):\n{event.link}\n"
    return f"[agentconsole] {title}", body


@dataclass(frozen=True)
class Backoff:
    """Retry ``n`` (after the n-th failed attempt) waits ``base_s * 2**(n-1)``, at most
    ``cap_s``; after ``max_attempts`` attempts the delivery has failed. No jitter: the clock is
    an input and the schedule is exact (tests rely on it); deliveries are few and spread."""

    base_s: float
    cap_s: float
    max_attempts: int

    def delay_s(self, attempts: int) -> float:
        return float(min(self.cap_s, self.base_s * 2 ** max(0, attempts - 1)))

    def exhausted(self, attempts: int) -> bool:
        return attempts >= self.max_attempts
