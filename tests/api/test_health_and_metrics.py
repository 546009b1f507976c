"""/healthz, /readyz and /metrics (issue 14 item 4), through the Django test client.

The personas' rights on /metrics: operator and admin (session or token) and the bearer token
of AGENTCONSOLE_METRICS_TOKEN may scrape; anonymous is 401; alice and the reviewer are 403.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from agentconsole.ops import health, heartbeat, metrics
from policy.models import Confirmation
from runs import models as m
from runs.engine.leases import HANDED_BACK, lease_acquire, lease_hand_back
from tests.api.api_kit import created_run, waiting_run
from tests.support.personas import People

pytestmark = pytest.mark.django_db

TOKEN = "metrics-test-token"


@pytest.fixture
def beats(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> heartbeat.HeartbeatStore:
    """The heartbeats of this test only (a developer's or another test's worker beats too)."""
    store = heartbeat.FileHeartbeats(tmp_path / "heartbeats")
    monkeypatch.setattr(heartbeat, "store", lambda **_: store)
    return store


@pytest.fixture
def shared_key(monkeypatch: pytest.MonkeyPatch) -> str:
    if not django_settings.REDIS_URL:
        pytest.skip("the shared step histogram and takeover counter live in Redis (REDIS_URL)")
    key = f"agentconsole:metrics:test:{uuid.uuid4().hex}"
    monkeypatch.setattr(metrics, "REDIS_KEY", key)
    client = metrics.shared()
    assert client is not None
    yield key
    client.delete(key)


def scrape(client: Any = None, **headers: str) -> Any:
    return (client or Client()).get("/metrics", **headers)


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_healthz_checks_nothing(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_needs_a_recent_worker_heartbeat(beats: heartbeat.HeartbeatStore) -> None:
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unready"
    assert body["failed"] == ["worker_heartbeat"]
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["broker"]["ok"] is True
    assert body["checks"]["channel_layer"] == {"ok": True}

    beats.beat("worker.1@host", time.time())
    response = Client().get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "ready"

    beats.forget("worker.1@host")
    beats.beat(
        "worker.2@host", time.time() - django_settings.AGENTCONSOLE_READY_HEARTBEAT_MAX_AGE_S - 5
    )
    body = Client().get("/readyz").json()
    assert body["failed"] == ["worker_heartbeat"]
    assert "old" in body["checks"]["worker_heartbeat"]["detail"]


def test_readyz_names_a_failed_dependency_without_its_address(
    beats: heartbeat.HeartbeatStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    beats.beat("worker.1@host", time.time())

    def refused() -> dict[str, Any]:
        raise ConnectionRefusedError("redis://:secret@10.0.0.7:6379 refused")

    monkeypatch.setitem(health.CHECKS, "broker", refused)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"] == {"ok": False, "error": "ConnectionRefusedError"}
    assert b"secret" not in response.content
    assert b"10.0.0.7" not in response.content


@pytest.mark.parametrize(
    ("who", "status"),
    [("anonymous", 401), ("alice", 403), ("reviewer", 403), ("operator", 200), ("admin", 200)],
)
def test_metrics_access(people: People, who: str, status: int) -> None:
    response = scrape(getattr(people, who).client)
    assert response.status_code == status
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_metrics_access_by_session(people: People) -> None:
    client = Client()
    client.force_login(people.operator.user)
    assert scrape(client).status_code == 200
    client.force_login(people.alice.user)
    assert scrape(client).status_code == 403


def test_metrics_bearer_token(settings: Any) -> None:
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    assert scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert scrape(HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    settings.AGENTCONSOLE_METRICS_TOKEN = ""
    # No token configured: a bearer header proves nothing.
    assert scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 401


def test_metrics_read_the_database_in_five_queries(
    people: People, settings: Any, django_assert_num_queries: Any
) -> None:
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    waiting = waiting_run(people.alice.user)
    created_run(people.bob.user)
    m.Handoff.objects.create(run_id=waiting.run_id, reason="TEST", bundle={})
    # The confirmation has waited for a minute.
    Confirmation.objects.filter(pk=waiting.confirmation_id).update(
        requested_at=timezone.now() - timedelta(seconds=60)
    )
    with django_assert_num_queries(5):
        response = scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    got = samples(response.content.decode())
    assert got['agentconsole_runs{status="waiting_confirmation"}'] == 1
    assert got['agentconsole_runs{status="created"}'] == 1
    assert got["agentconsole_pending_confirmations"] == 1
    assert got["agentconsole_oldest_pending_confirmation_age_seconds"] >= 60
    assert got['agentconsole_open_handoffs{status="open"}'] == 1
    assert got['agentconsole_open_handoffs{status="claimed"}'] == 0
    # The scenario's first proposal waits for a person: nothing ran, so no ledger row yet.
    assert not any(k.startswith("agentconsole_tool_calls_total") for k in got)
    assert got['agentconsole_websocket_clients{kind="trace"}'] == 0
    assert "agentconsole_queue_depth" in got


def test_tool_outcomes_come_from_the_ledger(people: People, settings: Any) -> None:
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    run_id = created_run(people.alice.user)
    for i, status in enumerate(["succeeded", "succeeded", "failed"]):
        m.LedgerEntry.objects.create(
            run_id=run_id,
            proposal_id=f"p{i}",
            tool_name="search_public",
            tool_version="1",
            idempotency_token=f"tok-{i}",
            arguments_hash="0" * 64,
            proposal_hash="0" * 64,
            arguments={},
            deadline_ms=0,
            step=i + 1,
            status=status,
        )
    got = samples(scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert got['agentconsole_tool_calls_total{status="succeeded",tool="search_public"}'] == 2
    assert got['agentconsole_tool_calls_total{status="failed",tool="search_public"}'] == 1


def test_takeovers_are_counted_across_processes(
    people: People, settings: Any, shared_key: str
) -> None:
    """A lease taken from a holder that stopped renewing counts; a hand-back does not."""
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    run_id = created_run(people.alice.user)
    past = timezone.now() - timedelta(seconds=5)
    m.Run.objects.filter(pk=run_id).update(lease_owner="gone:1:dead", lease_expires_at=past)
    assert lease_acquire(run_id=run_id, owner="w2")
    assert lease_hand_back(run_id=run_id, owner="w2", clock=_Clock()) is not None
    assert m.Run.objects.get(pk=run_id).lease_owner.startswith(HANDED_BACK)
    assert lease_acquire(run_id=run_id, owner="w3")  # an expired hand-back name: no takeover
    got = samples(scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert got["agentconsole_lease_takeovers_total"] == 1


def test_step_latency_is_observed_by_the_run_store(
    people: People, shared_key: str, settings: Any
) -> None:
    """The runner's store (agentconsole.wiring.store) times each planner step it commits."""
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    waiting_run(people.alice.user)  # one planner step, in this process, through the real runner
    got = samples(scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert got["agentconsole_step_latency_seconds_count"] == 1
    assert got['agentconsole_step_latency_seconds_bucket{le="+Inf"}'] == 1


def test_step_latency_buckets(shared_key: str, settings: Any) -> None:
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    for seconds in (0.01, 0.3, 500.0):
        metrics.observe_step_latency(seconds)
    got = samples(scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert got['agentconsole_step_latency_seconds_bucket{le="0.05"}'] == 1
    assert got['agentconsole_step_latency_seconds_bucket{le="0.5"}'] == 2
    assert got['agentconsole_step_latency_seconds_bucket{le="120.0"}'] == 2
    assert got['agentconsole_step_latency_seconds_bucket{le="+Inf"}'] == 3
    assert got["agentconsole_step_latency_seconds_count"] == 3
    assert got["agentconsole_step_latency_seconds_sum"] == pytest.approx(500.31)


def test_model_calls_in_flight_and_queued_per_endpoint(people: People, settings: Any) -> None:
    """issue 22 item 3: the gateway's work, from the database (any web process answers)."""
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {"idle": {"base_url": "http://127.0.0.1:9/v1"}}
    run_id = created_run(people.alice.user)
    now = timezone.now()
    for step, (endpoint, status) in enumerate(
        [("fast", "sending"), ("fast", "queued"), ("fast", "queued"), ("slow", "answered")], 1
    ):
        m.ModelCall.objects.create(
            id=f"{run_id}:s{step}", run_id=run_id, step=step, subject="alice",
            endpoint=endpoint, model="m", request={}, request_hash="0" * 64, deadline_ms=0,
            status=status, not_before=now,
            **({"lease_owner": "g", "lease_expires_at": now} if status == "sending" else {}),
        )  # fmt: skip
    got = samples(scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert got['agentconsole_model_calls_in_flight{endpoint="fast"}'] == 1
    assert got['agentconsole_model_calls_queued{endpoint="fast"}'] == 2
    # An answered call is neither: "slow" has nothing open and is not configured.
    assert not any('endpoint="slow"' in k for k in got if k.startswith("agentconsole_model_calls"))
    assert got['agentconsole_model_calls_in_flight{endpoint="idle"}'] == 0  # configured, idle


def test_mcp_calls_in_flight_and_queued_per_server(people: People, settings: Any) -> None:
    """issue 22 item 4: the MCP tool calls the gateway makes, by server, apart from models."""
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    run_id = created_run(people.alice.user)
    now = timezone.now()
    for attempt, status in enumerate(["sending", "sending", "queued", "consumed"], 1):
        m.ModelCall.objects.create(
            id=f"{run_id}:tabc:{attempt}", run_id=run_id, kind="tool", step=1, subject="alice",
            endpoint="mcp:notes", model="lookup", request={}, request_hash="0" * 64,
            deadline_ms=0, status=status, not_before=now,
            **({"lease_owner": "g", "lease_expires_at": now} if status == "sending" else {}),
        )  # fmt: skip
    got = samples(scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    assert got['agentconsole_mcp_calls_in_flight{server="notes"}'] == 2
    assert got['agentconsole_mcp_calls_queued{server="notes"}'] == 1
    assert not any("mcp:notes" in k for k in got)  # not a model endpoint


def test_model_call_latency_histogram_per_endpoint(shared_key: str, settings: Any) -> None:
    settings.AGENTCONSOLE_METRICS_TOKEN = TOKEN
    metrics.observe_model_latency(
        [
            ("model", "fast", 0.2),
            ("model", "fast", 3.0),
            ("model", "slow", 200.0),
            ("tool", "mcp:notes", 0.3),
        ]
    )
    got = samples(scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode())
    # An MCP server's calls have a histogram of their own, by server.
    mcp = "agentconsole_mcp_call_latency_seconds"
    assert got[f'{mcp}_bucket{{le="0.5",server="notes"}}'] == 1
    assert got[f'{mcp}_bucket{{le="0.25",server="notes"}}'] == 0
    assert not any("notes" in k for k in got if k.startswith("agentconsole_model_call"))
    name = "agentconsole_model_call_latency_seconds"
    assert got[f'{name}_bucket{{endpoint="fast",le="0.25"}}'] == 1
    assert got[f'{name}_bucket{{endpoint="fast",le="5.0"}}'] == 2
    assert got[f'{name}_count{{endpoint="fast"}}'] == 2
    assert got[f'{name}_bucket{{endpoint="slow",le="120.0"}}'] == 0
    assert got[f'{name}_bucket{{endpoint="slow",le="+Inf"}}'] == 1
    assert got[f'{name}_sum{{endpoint="slow"}}'] == pytest.approx(200.0)


class _Clock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)
