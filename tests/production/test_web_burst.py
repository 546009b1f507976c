"""The web tier holds a burst (issue 22 item 5), on a real ``scripts/web.sh`` process with the
documented production environment.

- 1,000 connections opened at once, each with a request, all answered: no reset, no refusal.
  daphne's default listen backlog of 50 reset the connections of a burst before accepting them
  (44 of 200 simultaneous creates); web.sh now listens with WEB_BACKLOG (default 4096).
- Creates beyond the per-user limits, all at once: each refused with 429 and the limit's code,
  none reset.
- Creates within the limits, far more at once than the process has database connections: all
  created. Each request once took a thread and waited for a connection of the pool; a burst
  waited out the pool's time-out and got 503. Requests now wait their turn on the event loop
  (agentconsole/ops/admission.py).

Clients are raw asyncio sockets on 127.0.0.1 (``bench.burst``): a client library's retries
would hide a reset.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from bench import burst
from tests.production.prod_kit import production_env
from tests.production.test_production_stack import (
    ROOT,
    Redis,
    _free_port,
    _requirements,
    _wait,
)
from tests.support.procs import group, kill_all
from tests.support.workers import worker_database_url

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
CONNECTIONS = 1000
CREATES = 200
RATE = 10  # creates per user per minute, for this test
BURST_S = 120  # every answer of a burst, at most (a loaded 2-core machine)
HTTPS = {"X-Forwarded-Proto": "https"}  # as the TLS proxy says (SECURE_PROXY_SSL_HEADER)


@pytest.fixture
def web(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[int]:
    # A test may add to the environment (indirect parametrization).
    extra: dict[str, str] = getattr(request, "param", {})
    _requirements()
    broker = Redis(port=_free_port(), folder=tmp_path)
    broker.start()
    port = _free_port()
    env = {
        **os.environ,
        **production_env(),
        "DATABASE_URL": worker_database_url(),
        "REDIS_URL": broker.url,  # the throttle's counts and the broker: this test's own
        "PORT": str(port),
        "AGENTCONSOLE_BIN": str(Path(sys.executable).parent),
        "AGENTCONSOLE_RUN_CREATE_RATE": f"{RATE}/min",
        "AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT": "10",
        "LOG_LEVEL": "WARNING",
        **extra,
    }
    env.pop("CELERY_BROKER_URL", None)
    with (tmp_path / "web.log").open("wb") as log:
        process = subprocess.Popen(
            [str(ROOT / "scripts" / "web.sh")],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait(lambda: _healthy(port), 90, "web.sh never answered /healthz")
        yield port
    finally:
        kill_all(group(process.pid))
        process.wait(10)
        broker.stop()


def _healthy(port: int) -> bool:
    (outcome,) = asyncio.run(
        burst.send_all("127.0.0.1", port, [burst.Request("GET", "/healthz", {})], timeout_s=5)
    )
    return outcome.status == 200


def _token(name: str) -> str:
    user = get_user_model().objects.create_user(username=name)
    return Token.objects.create(user=user).key


def test_a_thousand_simultaneous_connections_are_all_answered(web: int) -> None:
    # An API read (authentication, a query): each request holds its connection a while, so the
    # burst waits in the listen queue rather than being served as fast as it arrives.
    headers = {"Authorization": f"Token {_token('reader')}", **HTTPS}
    requests = [burst.Request("GET", "/api/runs/?page_size=1", headers)] * CONNECTIONS

    outcomes = asyncio.run(burst.send_all("127.0.0.1", web, requests, timeout_s=BURST_S))

    assert burst.tally(outcomes) == {"200": CONNECTIONS}  # no reset, refusal or timeout


def test_creates_over_the_limits_get_429_not_a_reset(web: int) -> None:
    token = _token("burst")
    body = {
        "goal": "a burst of creates",
        "planner": {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]},
    }
    headers = {"Authorization": f"Token {token}", **HTTPS}
    requests = [burst.Request("POST", "/api/runs/", headers, body)] * CREATES

    outcomes = asyncio.run(burst.send_all("127.0.0.1", web, requests, timeout_s=BURST_S))

    counts = burst.tally(outcomes)
    assert set(counts) <= {"201", "429"}, counts  # no reset, no error, no 5xx
    # The throttle's count is a read then a write (DRF): a few concurrent creates may pass it;
    # the active-runs limit (10 per subject, counted in the database) stops the rest.
    assert 1 <= counts.get("201", 0) <= 10, counts
    refused = {o.body["code"] for o in outcomes if o.status == 429}
    assert refused <= {"RUN_CREATE_THROTTLED", "ACTIVE_RUNS_LIMIT"}, refused
    assert counts["429"] == CREATES - counts.get("201", 0)


POOL = {"DB_POOL_MAX_SIZE": "3", "DB_POOL_TIMEOUT_S": "2"}


@pytest.mark.parametrize("web", [POOL], indirect=True)
def test_a_burst_beyond_the_connection_pool_waits_its_turn_and_is_all_created(web: int) -> None:
    body = {
        "goal": "one of a burst",
        "planner": {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]},
    }
    requests = []
    for i in range(60):  # five creates each: within the create rate and the active runs
        headers = {"Authorization": f"Token {_token(f'burst{i}')}", **HTTPS}
        requests += [burst.Request("POST", "/api/runs/", headers, body)] * 5

    outcomes = asyncio.run(burst.send_all("127.0.0.1", web, requests, timeout_s=BURST_S))

    assert burst.tally(outcomes) == {"201": len(requests)}  # none 503, reset or timed out
