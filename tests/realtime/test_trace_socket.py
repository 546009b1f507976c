"""/ws/runs/<id>/trace/: replay from the database, then live; no gap, no duplicate."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.authtoken.models import Token

from agentconsole import wiring
from agentconsole.asgi import application
from runs import consumers
from runs.domain import lifecycle
from runs.domain.console import timeline
from runs.domain.errors import VersionConflict
from runs.models import TraceEvent
from runs.start.scenarios import parse_scenario, run_scenario
from tests.support.races import race

pytestmark = pytest.mark.django_db(transaction=True)

SCENARIOS = Path(__file__).resolve().parents[2] / "runs" / "fixtures" / "scenarios"


def _run_for(user) -> str:
    scenario = parse_scenario((SCENARIOS / "s15-planner-exhausted.json").read_bytes())
    return run_scenario(scenario, owner=user)["state"]["run_id"]


def _append(run_id: str, n: int, who: str = "test") -> None:
    """Append n trace events through the store (compare-and-set, retried on conflict)."""
    store = wiring.store()
    for i in range(n):
        for _ in range(100):
            try:
                commit = lifecycle.handoff_event(
                    store.load(run_id), "handoff.claimed", by=f"{who}-{i}"
                )
                store.apply(commit)
                break
            except VersionConflict:  # a concurrent writer won this version: read again
                pass


def _token(user) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Token {Token.objects.get_or_create(user=user)[0].key}".encode())]


async def _connect(path: str, who):
    """``who``: a user (authenticated by a fresh token) or raw headers."""
    headers = who if isinstance(who, list) else await sync_to_async(_token)(who)
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await comm.connect(timeout=5)
    return comm, connected, code


async def _receive_events(comm, until_sequence: int, timeout: float = 5) -> list[int]:
    seen = []
    while not seen or seen[-1] < until_sequence:
        frame = await comm.receive_json_from(timeout=timeout)
        if frame["type"] == "event":
            seen.append(frame["sequence"])
    return seen


async def _replay(comm):
    """The frames of the replay, then the ``replayed`` marker that ends it."""
    frames = []
    while True:
        frame = await comm.receive_json_from(timeout=5)
        if frame["type"] == "replayed":
            return frames, frame
        frames.append(frame)


def _alices_run(personas):
    """alice, a run of hers, and how many trace events it has."""
    alice = personas["alice"]
    run_id = _run_for(alice)
    return alice, run_id, TraceEvent.objects.filter(run_id=run_id).count()


def test_replay_then_live_in_order(personas, monkeypatch):
    # Only the doorbell can deliver the live part: the periodic catch-up is pushed out of reach.
    monkeypatch.setattr(consumers, "CATCH_UP_S", 3600)
    alice, run_id, total = _alices_run(personas)

    async def scenario():
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/?after=0", alice)
        assert connected
        replayed, marker = await _replay(comm)
        assert marker["last_sequence"] == total
        assert [f["sequence"] for f in replayed] == list(range(1, total + 1))
        await sync_to_async(_append)(run_id, 3)
        live = await _receive_events(comm, total + 3)
        assert live == [total + 1, total + 2, total + 3]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_reconnect_with_after_gives_no_gap_and_no_duplicate(personas):
    alice, run_id, total = _alices_run(personas)

    async def scenario():
        headers = alice
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/?after=2", headers)
        assert connected
        first = await _receive_events(comm, total)
        assert first == list(range(3, total + 1))
        await comm.disconnect()
        # Events committed while the client is away.
        await sync_to_async(_append)(run_id, 4)
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/?after={first[-1]}", headers)
        assert connected
        second = await _receive_events(comm, total + 4)
        assert second == list(range(total + 1, total + 5))
        assert (await comm.receive_json_from(timeout=5))["type"] == "replayed"
        await comm.disconnect()

    async_to_sync(scenario)()


def test_periodic_catch_up_delivers_when_the_doorbell_is_lost(personas, monkeypatch):
    """The embedded deployment: a worker's doorbell never reaches the web process."""
    monkeypatch.setattr(consumers, "CATCH_UP_S", 0.05)
    monkeypatch.setattr("runs.engine.doorbell.ring_after_commit", lambda *a, **k: None)
    wiring_store = wiring.store

    def silent_store(lease_owner=None):
        store = wiring_store(lease_owner)
        store.on_commit_events = None
        return store

    monkeypatch.setattr(wiring, "store", silent_store)
    alice, run_id, total = _alices_run(personas)

    async def scenario():
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/?after={total}", alice)
        assert connected
        assert (await comm.receive_json_from(timeout=5)) == {
            "type": "replayed",
            "last_sequence": total,
        }
        await sync_to_async(_append)(run_id, 2)
        assert await _receive_events(comm, total + 2) == [total + 1, total + 2]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_several_writers_no_gap_no_duplicate(personas):
    alice, run_id, total = _alices_run(personas)
    writers, per_writer = 3, 10

    def write_concurrently() -> None:
        outcomes = race(lambda k: _append(run_id, per_writer, who=f"w{k}"), writers)
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes

    async def scenario():
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/?after=0", alice)
        assert connected
        await sync_to_async(write_concurrently)()
        seen = await _receive_events(comm, total + writers * per_writer, timeout=10)
        assert seen == list(range(1, total + writers * per_writer + 1))
        await comm.disconnect()

    async_to_sync(scenario)()
    assert TraceEvent.objects.filter(run_id=run_id).count() == total + writers * per_writer


def test_refusals(personas):
    alice, bob, operator = personas["alice"], personas["bob"], personas["operator"]
    run_id = _run_for(alice)

    async def scenario():
        _, connected, code = await _connect(f"/ws/runs/{run_id}/trace/", [])
        assert (connected, code) == (False, 4401)  # anonymous
        _, connected, code = await _connect(f"/ws/runs/{run_id}/trace/", bob)
        assert (connected, code) == (False, 4404)  # a foreign run is not disclosed
        _, connected, code = await _connect(f"/ws/runs/{run_id}/trace/?after=-1", alice)
        assert (connected, code) == (False, 4400)
        _, connected, code = await _connect("/ws/runs/run_nope/trace/", alice)
        assert (connected, code) == (False, 4404)
        bad = [(b"authorization", b"Token not-a-token")]
        _, connected, code = await _connect(f"/ws/runs/{run_id}/trace/", bad)
        assert (connected, code) == (False, 4401)
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/", operator)
        assert connected  # operators see every run
        await comm.disconnect()

    async_to_sync(scenario)()


def test_session_cookie_needs_an_allowed_origin(personas):
    alice = personas["alice"]
    run_id = _run_for(alice)
    client = Client()
    client.force_login(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()

    async def scenario():
        ok = [(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")]
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/", ok)
        assert connected
        await comm.disconnect()
        foreign = [(b"cookie", cookie), (b"origin", b"http://evil.example")]
        _, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/", foreign)
        assert not connected
        # No Origin: only a token authenticates; the cookie is ignored.
        _, connected, code = await _connect(f"/ws/runs/{run_id}/trace/", [(b"cookie", cookie)])
        assert (connected, code) == (False, 4401)

    async_to_sync(scenario)()


def _replayed_frames(run_id: str, user) -> list[dict]:
    """The frames a socket of ``user`` on the run replays on connect."""

    async def scenario():
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/", user)
        assert connected
        frames, _ = await _replay(comm)
        await comm.disconnect()
        return frames

    return async_to_sync(scenario)()


def test_frames_hold_trace_summaries_only(personas):
    alice = personas["alice"]
    run_id = _run_for(alice)

    frames = _replayed_frames(run_id, alice)
    assert {tuple(sorted(f)) for f in frames} == {
        ("created_at", "details", "event", "proposal_id", "sequence", "summary", "tone", "type")
    }
    rows = list(TraceEvent.objects.filter(run_id=run_id).order_by("sequence"))
    assert [f["details"] for f in frames] == [r.details for r in rows]
    assert len(json.dumps(frames)) < 50_000


def _page_lines(client: Client, run_id: str) -> dict[int, tuple[str, str]]:
    """sequence -> (tone, summary) of each trace line the run's page renders."""
    page = client.get(f"/runs/{run_id}/").content.decode()
    found = re.findall(
        r'<li class="trace-event tone-(\w+)" data-seq="(\d+)".*?'
        r'<span class="trace-summary">(.*?)</span>',
        page,
    )
    return {int(seq): (tone, html.unescape(text)) for tone, seq, text in found}


def test_a_live_frame_says_what_the_page_says_of_the_same_event(personas):
    # One rule for the wording (issue 25 item 5): the server sends each frame's summary and
    # tone, the script only shows them; they are the page's own, line by line.
    alice = personas["alice"]
    run_id = _run_for(alice)

    frames = _replayed_frames(run_id, alice)
    client = Client()
    client.force_login(alice)
    page = _page_lines(client, run_id)

    assert len(frames) >= 5
    assert {f["sequence"]: (f["tone"], f["summary"]) for f in frames} == page
    assert any(f["summary"].startswith("Run stopped") for f in frames)


def test_the_console_script_holds_no_event_wording():
    # Every summary is written in runs/domain/console/timeline.py only: take the opening words of
    # each event's summary and look for them in the script.
    script = (Path(__file__).resolve().parents[2] / "static" / "console" / "trace.js").read_text()
    for name in timeline._SUMMARIES:
        summary = timeline.describe({"sequence": 1, "event": name, "details": {}}).summary
        opening = " ".join(summary.split()[:2])
        assert opening not in script, (name, opening)
