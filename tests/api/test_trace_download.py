"""``GET /api/runs/<id>/trace.json|.ndjson`` (issue 24 item 5): a run's trace as a file, for
whoever may see the run; streamed in batches, each event as the events API gives it, secrets
as the tags the trace recorded.

Personas (tests/support/personas.py): ``alice`` owns the runs; ``bob`` is the outsider (404:
the run's existence is not disclosed); ``reviewer`` sees every run; anonymous is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.tools.corpus import document_load
from runs.trace import trace_export
from tests.api import api_kit as kit
from tests.support.planner import tool_call

OPENAI = "sk-live-abc123def456ghi789jkl012"
PASSWORD = "hunter2"
WITH_SECRETS = f"use {OPENAI} and password={PASSWORD}"


def body(response: Any) -> str:
    assert response.status_code == 200, response.content.decode()[:300]
    assert response.streaming  # never built whole in memory
    return b"".join(response.streaming_content).decode()


def ndjson(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.django_db
def test_both_formats_hold_every_event_as_the_events_api_gives_it(people: kit.People) -> None:
    run_id = kit.waiting_run(people.alice.user).run_id
    api = kit.assert_ok(people.alice.get(f"/api/runs/{run_id}/events/?limit=200"))["results"]
    assert len(api) > 5
    as_lines = people.alice.get(f"/api/runs/{run_id}/trace.ndjson")
    assert as_lines["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert as_lines["Content-Disposition"] == f'attachment; filename="trace-{run_id}.ndjson"'
    assert ndjson(body(as_lines)) == api
    as_array = people.alice.get(f"/api/runs/{run_id}/trace.json")
    assert as_array["Content-Type"] == "application/json; charset=utf-8"
    assert as_array["Content-Disposition"] == f'attachment; filename="trace-{run_id}.json"'
    assert json.loads(body(as_array)) == api


@pytest.mark.django_db
def test_a_trace_longer_than_a_batch_is_read_in_batches_with_no_gap(
    people: kit.People, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of 3: the file is whole and in order, the JSON's commas fall between batches
    too, and each batch is one query (a long trace is never one read)."""
    monkeypatch.setattr(trace_export, "BATCH", 3)
    run_id = kit.waiting_run(people.alice.user).run_id
    total = m.TraceEvent.objects.filter(run_id=run_id).count()
    assert total > 6
    assert total % 3
    lines = ndjson(body(people.alice.get(f"/api/runs/{run_id}/trace.ndjson")))
    assert [e["sequence"] for e in lines] == list(range(1, total + 1))
    array = json.loads(body(people.alice.get(f"/api/runs/{run_id}/trace.json")))
    assert [e["sequence"] for e in array] == list(range(1, total + 1))
    reads = []
    real = trace_export._batch
    monkeypatch.setattr(trace_export, "_batch", lambda r, a: reads.append(a) or real(r, a))
    body(people.alice.get(f"/api/runs/{run_id}/trace.ndjson"))
    assert reads == list(range(0, total, 3))


@pytest.mark.django_db(transaction=True)
def test_the_asgi_stream_is_the_same_file_batch_by_batch(
    people: kit.People, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under daphne the view hands Django an async iterator (a sync one would be drained into
    memory first): the same bytes, read a batch at a time in a thread."""
    monkeypatch.setattr(trace_export, "BATCH", 4)
    run_id = kit.waiting_run(people.alice.user).run_id

    async def collect() -> list[bytes]:
        return [c async for c in trace_export.trace_chunks_async(run_id=run_id, fmt="json")]

    chunks = async_to_sync(collect)()
    total = m.TraceEvent.objects.filter(run_id=run_id).count()
    assert len(chunks) == 2 + total // 4 + 1  # "[", a chunk per batch (the last short), "]"
    assert chunks == list(trace_export.trace_chunks(run_id=run_id, fmt="json"))


@pytest.mark.django_db
def test_an_empty_json_trace_is_an_empty_array() -> None:
    assert b"".join(trace_export.trace_chunks(run_id="run_none", fmt="json")) == b"[]\n"
    assert b"".join(trace_export.trace_chunks(run_id="run_none", fmt="ndjson")) == b""


@pytest.mark.django_db
def test_only_who_sees_the_run_downloads_it(people: kit.People) -> None:
    run_id = kit.created_run(people.alice.user)
    for fmt in ("json", "ndjson"):
        path = f"/api/runs/{run_id}/trace.{fmt}"
        kit.assert_error(people.bob.get(path), 404, kit.NOT_FOUND)
        kit.assert_error(kit.anonymous().get(path), 401, kit.NOT_AUTHENTICATED)
        assert people.reviewer.get(path).status_code == 200
        kit.assert_error(people.alice.get(f"/api/runs/run_nope/trace.{fmt}"), 404, kit.NOT_FOUND)
    # Another format is no route (the API's 404), not a 500.
    kit.assert_error(people.alice.get(f"/api/runs/{run_id}/trace.xml"), 404, kit.NOT_FOUND)


@pytest.mark.django_db
def test_a_client_that_asks_for_ndjson_gets_it(people: kit.People) -> None:
    run_id = kit.created_run(people.alice.user)
    response = people.alice.get(
        f"/api/runs/{run_id}/trace.ndjson", HTTP_ACCEPT="application/x-ndjson"
    )
    assert next(e["event"] for e in ndjson(body(response))) == "run.created"
    refused = people.bob.get(f"/api/runs/{run_id}/trace.ndjson", HTTP_ACCEPT="application/x-ndjson")
    kit.assert_error(refused, 404, kit.NOT_FOUND)


@pytest.mark.django_db(transaction=True)
def test_a_secret_in_the_run_is_in_the_file_only_as_its_tag(
    people: kit.People, settings: Any, tmp_path: Path
) -> None:
    """A document with a secret, searched and cited; the planner's query and the final answer
    hold secrets too. The file has the tags the trace recorded, never the secret."""
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = str(tmp_path / "run-output")
    doc = tmp_path / "retry-notes.md"
    doc.write_text(f"# Retry notes\n\nThe retry policy: {WITH_SECRETS}\n", encoding="utf-8")
    document_load(path=doc)
    alice = people.alice.user
    state = services.run_create(
        subject="alice",
        owner=alice,
        goal=f"Find the retry policy; {WITH_SECRETS}",
        budgets=RunBudgets(max_steps=4, max_tool_calls=2, deadline_ms=600_000),
        grants=[{"capability": "search:public", "resource_scope": "public", "expires_at_step": 4}],
        planner={
            "kind": "fixture",
            "outputs": [
                tool_call("p1", "search_public", {"query": f"retry policy {WITH_SECRETS}"}),
                {"kind": "final", "answer": WITH_SECRETS, "citation_observation_ids": ["tool-1"]},
            ],
        },
    )
    services.run_advance(run_id=state.run_id)
    assert m.Run.objects.get(pk=state.run_id).status == "completed"
    for fmt in ("json", "ndjson"):
        text = body(people.alice.get(f"/api/runs/{state.run_id}/trace.{fmt}"))
        assert OPENAI not in text
        assert f"password={PASSWORD}" not in text
        assert "[secret:hmac-sha256:" in text
