"""issue 9 item 13: a session socket is accepted only from its own exact origin (scheme, host and
port) or from one of CSRF_TRUSTED_ORIGINS, the rule Django's CSRF check applies to a POST."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from agentconsole.asgi import application
from tests.realtime.test_trace_socket import _run_for

pytestmark = pytest.mark.django_db(transaction=True)


def _cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _opens(path: str, headers: list[tuple[bytes, bytes]], scheme: str = "ws") -> bool:
    comm = WebsocketCommunicator(application, path, headers=headers)
    comm.scope["scheme"] = scheme  # the scope is the app's: set before connect() starts it
    connected, _ = await comm.connect(timeout=5)
    if connected:
        await comm.disconnect()
    return connected


def test_the_origin_must_match_scheme_host_and_port(personas: Any, settings: Any) -> None:
    """issue 9 item 13: the old check compared the host name only, so another port of the same
    host (another app) and http for an https console were accepted."""
    settings.CSRF_TRUSTED_ORIGINS = []
    path = f"/ws/runs/{_run_for(personas['alice'])}/trace/"
    cookie = _cookie(personas["alice"])

    def case(origin: str, host: str = "localhost:8000", scheme: str = "ws", *more: Any) -> bool:
        headers = [(b"cookie", cookie), (b"origin", origin.encode()), (b"host", host.encode())]
        headers += list(more)
        return async_to_sync(_opens)(path, headers, scheme)

    assert case("http://localhost:8000")  # same origin
    assert not case("http://localhost:9000")  # same host, another port
    assert not case("http://localhost")  # same host, default port
    assert not case("https://localhost:8000")  # https page, plain ws socket: not the same origin
    assert case("https://localhost:8000", "localhost:8000", "wss")
    assert not case("http://localhost:8000", "localhost:8000", "wss")
    assert not case("http://evil.example", "evil.example")  # Host not in ALLOWED_HOSTS
    assert not case("http://evil.example")
    assert not case("null")
    # No Host header: nothing to compare with, refused.
    assert not async_to_sync(_opens)(path, [(b"cookie", cookie), (b"origin", b"http://localhost")])


def test_trusted_origins_and_the_tls_proxy_header(personas: Any, settings: Any) -> None:
    """issue 9 item 13: CSRF_TRUSTED_ORIGINS entries are accepted exactly; behind a TLS proxy
    SECURE_PROXY_SSL_HEADER makes the socket's own origin https."""
    path = f"/ws/runs/{_run_for(personas['alice'])}/trace/"
    cookie = _cookie(personas["alice"])
    base = [(b"cookie", cookie), (b"host", b"localhost:8000")]
    trusted = "https://console.example.com"

    def opens(origin: str, *more: tuple[bytes, bytes]) -> bool:
        return async_to_sync(_opens)(path, [*base, (b"origin", origin.encode()), *more])

    settings.CSRF_TRUSTED_ORIGINS = []
    assert not opens(trusted)
    settings.CSRF_TRUSTED_ORIGINS = [trusted]
    assert opens(trusted)
    assert not opens("http://console.example.com")  # exact: the scheme is part of it
    assert not opens("https://console.example.com:8443")
    assert not opens("https://evil.console.example.com")

    forwarded = (b"x-forwarded-proto", b"https")
    settings.SECURE_PROXY_SSL_HEADER = None
    assert not opens("https://localhost:8000", forwarded)  # a client's header counts for nothing
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert opens("https://localhost:8000", forwarded)
    assert not opens("http://localhost:8000", forwarded)
