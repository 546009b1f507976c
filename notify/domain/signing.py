"""How a webhook is signed, and how its receiver checks it (docs/notifications.md).

Each POST carries:

``X-Agentconsole-Timestamp``
    the Unix time of the attempt, in whole seconds;
``X-Agentconsole-Signature``
    ``v1=`` and the lowercase hex HMAC-SHA256, keyed with the subscription's secret, of the
    timestamp, a ``.`` and the exact body bytes (``f"{timestamp}.".encode() + body``).

The timestamp is inside the signed text, so a captured request cannot be replayed with a fresh
timestamp; the receiver refuses one older than its tolerance (``verify``'s ``tolerance_s``, five
minutes as Stripe does). The scheme is versioned (``v1``): a new one is a new prefix, and a
receiver that knows only ``v1`` refuses the rest.
"""

from __future__ import annotations

import hashlib
import hmac

SCHEME = "v1"
TIMESTAMP_HEADER = "X-Agentconsole-Timestamp"
SIGNATURE_HEADER = "X-Agentconsole-Signature"
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The value of ``X-Agentconsole-Signature`` for ``body`` sent at ``timestamp``."""
    signed = f"{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"{SCHEME}={digest}"


def verify(
    secret: str,
    *,
    timestamp: str,
    signature_header: str,
    body: bytes,
    now_s: float,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> bool:
    """What a receiver does: the timestamp is an integer within ``tolerance_s`` of its own
    clock, and the signature matches, compared in constant time."""
    if not timestamp.isdigit() or abs(now_s - int(timestamp)) > tolerance_s:
        return False
    expected = signature(secret, int(timestamp), body)
    return hmac.compare_digest(expected.encode(), signature_header.strip().encode())
