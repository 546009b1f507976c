"""The two ways out: a signed webhook POST and an e-mail. Each attempt ends in an ``Outcome``
with a stable error code; no exception leaves, and no error text from the far side is kept
(a receiver's page or an SMTP server's reply is not ours to store or show).

The POST is bounded: a connect-and-read timeout (``timeout_s``, a few seconds), no redirect
followed (a 3xx is a failure: the signature was for this URL), no proxy from the environment,
at most ``MAX_READ`` bytes of the answer read.
"""

from __future__ import annotations

import logging
import smtplib
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPMessage
from typing import IO

from django.core.mail import send_mail

from notify.domain import signing

log = logging.getLogger(__name__)

MAX_READ = 4096
EVENT_HEADER = "X-Agentconsole-Event"
DELIVERY_HEADER = "X-Agentconsole-Delivery"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status_code: int | None = None
    error: str = ""  # "" when ok


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None  # not followed: urllib then raises HTTPError with the 3xx


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def post_webhook(
    *,
    url: str,
    secret: str,
    body: bytes,
    event: str,
    delivery_id: int,
    timestamp: int,
    timeout_s: float,
) -> Outcome:
    """One signed POST of ``body`` to ``url``: a 2xx answer is a delivery, anything else a
    failed attempt with its code."""
    request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310 -- checked scheme
    request.add_header("Content-Type", "application/json")
    request.add_header("User-Agent", "agentconsole-webhook/1")
    request.add_header(EVENT_HEADER, event)
    request.add_header(DELIVERY_HEADER, str(delivery_id))
    request.add_header(signing.TIMESTAMP_HEADER, str(timestamp))
    request.add_header(signing.SIGNATURE_HEADER, signing.signature(secret, timestamp, body))
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            response.read(MAX_READ)
            status = response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return Outcome(False, exc.code, "HTTP_STATUS")
    except TimeoutError:
        return Outcome(False, None, "TIMEOUT")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return Outcome(False, None, "TIMEOUT")
        if isinstance(reason, ConnectionRefusedError):
            return Outcome(False, None, "CONNECTION_REFUSED")
        if isinstance(reason, socket.gaierror):
            return Outcome(False, None, "HOST_NOT_FOUND")
        return Outcome(False, None, "CONNECTION_FAILED")
    except (OSError, ValueError) as exc:
        # A reset connection, a TLS failure, a malformed answer: its class only, no text.
        log.info("webhook delivery %s failed: %s", delivery_id, type(exc).__name__)
        return Outcome(False, None, "CONNECTION_FAILED")
    if 200 <= status < 300:
        return Outcome(True, status)
    return Outcome(False, status, "HTTP_STATUS")


def send_email(*, address: str, subject: str, body: str, sender: str) -> Outcome:
    """One e-mail through Django's mail backend (``EMAIL_BACKEND``)."""
    try:
        sent = send_mail(subject, body, sender, [address], fail_silently=False)
    except (smtplib.SMTPException, OSError) as exc:
        log.info("e-mail delivery failed: %s", type(exc).__name__)
        return Outcome(False, None, "MAIL_FAILED")
    return Outcome(True) if sent == 1 else Outcome(False, None, "MAIL_NOT_SENT")
