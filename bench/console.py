"""The console's figures (issue 11, "Done when"): measured, never asserted in tests.

- ``bench_console_run_detail_ms``: server time of the run-detail page ``GET /runs/<id>/`` for a
  run with 1,000 trace events, made by real runner steps (target: under 300 ms).
- ``bench_console_trace_keepup``: one run stepping as fast as the runner can while a websocket
  client on a real daphne follows ``/ws/runs/<id>/trace/`` through the real channel layer:
  events written vs received, lost, duplicates, order, lag.

``BENCH_RUN_DETAIL_PATH`` (default ``/runs/{run_id}/``) names the page the first one times; a
page that does not answer 200 is an error in the results, never a figure.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
import uuid
from typing import Any

from bench import stack as st
from bench.harness import Context, percentile
from bench.trace_latency import _latencies, _run_all
from bench.ws_clients import _WsClients

DETAIL_EVENTS = 1_000
DETAIL_PATH = "/runs/{run_id}/"
# A search step writes 8 trace events (planner output, proposal received, schema, capability,
# confirmation, tool started, tool completed, result validated); the run's start and end a few.
EVENTS_PER_SEARCH = 8


def _run_with_events(owner: Any, tag: str, events: int) -> tuple[str, int]:
    """A run advanced to its end in-process by the real runner, with at least ``events`` trace
    events: (run id, its event count)."""
    from runs import services

    searches = events // EVENTS_PER_SEARCH
    state = st._search_run(subject=f"bench-detail-{tag}", owner=owner, searches=searches, tag=tag)
    state = services.run_advance(run_id=state.run_id)
    if state is None:
        raise RuntimeError("the run's lease was taken: nothing else should advance it")
    return state.run_id, state.trace_seq


def _time_gets(client: Any, path: str, warm: int, reps: int) -> tuple[list[float], int, int]:
    """``warm`` untimed and ``reps`` timed GETs of ``path``: (times in ms, queries, bytes)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(warm):
        response = client.get(path)
        if response.status_code != 200:
            raise RuntimeError(
                f"GET {path}: {response.status_code} (is the page built on this branch? "
                f"BENCH_RUN_DETAIL_PATH names another one)"
            )
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    return times, len(captured.captured_queries), len(response.content)


def bench_console_run_detail_ms(ctx: Context, *, reps: int = 30, warm: int = 3) -> dict[str, Any]:
    """Server time of the run-detail page of a run with 1,000 trace events."""
    from django.db import connections
    from django.test import Client

    from runs import models as m

    tag = uuid.uuid4().hex[:8]
    st._load_corpus()
    owner, _token = st._user(f"bench-detail-{tag}", "user")
    made = time.monotonic()
    run_id, events = _run_with_events(owner, tag, DETAIL_EVENTS)
    made_s = time.monotonic() - made
    path = os.environ.get("BENCH_RUN_DETAIL_PATH", DETAIL_PATH).format(run_id=run_id)
    client = Client()
    client.force_login(owner)
    try:
        times, queries, size = _time_gets(client, path, warm, reps)
    finally:
        connections.close_all()
    observations = m.Observation.objects.filter(run_id=run_id).count()
    how = (
        f"one run of {events} trace events and {observations} observations, made by real "
        f"runner steps in-process ({events // EVENTS_PER_SEARCH} search_public steps over the "
        f"demo corpus + a final; {made_s:.1f} s), {ctx.vendor}. django.test.Client in-process, "
        f"signed in as the run's owner (session): {warm} warm-ups then {reps} timed GETs of "
        f"{path.replace(run_id, '<id>')}; the clock spans client.get() (URL resolving, "
        f"middleware, session auth, the view, template rendering; no network). {queries} "
        f"queries, {size:,} bytes per page."
    )
    return {
        "console_run_detail_ms": {
            **st._ms(times),
            "p95": round(percentile(times, 95), 2),
            "events": events,
            "queries": queries,
            "target_max": 300,
            "how": how,
        }
    }


def _order_and_gaps(records: list[list[Any]], after: int, last: int) -> dict[str, Any]:
    """What one client received, in receipt order: counts, lost, duplicates, order kept."""
    seqs = [seq for _client, seq, _event, _t in records]
    unique = set(seqs)
    written = set(range(after + 1, last + 1))
    return {
        "written": len(written),
        "received": len(seqs),
        "lost": len(written - unique),
        "duplicates": len(seqs) - len(unique),
        "order_kept": all(a < b for a, b in itertools.pairwise(seqs)),
    }


def _follow(
    ctx: Context, owner_token: str, run_id: str, after: int, cap_at: float
) -> dict[str, Any]:
    """Daphne, one websocket client in a child process, one runner thread: run, then drain."""
    from django.db import connections

    from runs import models as m

    out: dict[str, Any] = {"commits": {run_id: []}, "rings": [], "errors": []}
    env = st._env(ctx)
    with contextlib.ExitStack() as stack:
        stack.callback(st._redis_cleanup, ctx, f"keepup-{run_id}", [run_id])
        port = st._start_daphne(stack, env)
        uri = f"ws://127.0.0.1:{port}/ws/runs/{run_id}/trace/?after={after}"
        client = _WsClients([(uri, owner_token)], {**env, "LOG_LEVEL": "WARNING"})
        stack.callback(client.stop)
        report = json.loads(client.expect("ready", timeout=60).split(" ", 1)[1])
        if report["unconnected"]:
            raise RuntimeError(f"the websocket client did not connect: {report['errors']}")
        out["advance_s"], out["cancelled"] = _run_all(
            [run_id], out["commits"], out["rings"], out["errors"], cap_at
        )
        last = m.Run.objects.values_list("trace_seq", flat=True).get(pk=run_id)
        connections.close_all()
        drained = time.monotonic()
        while client.received() < last - after and time.monotonic() - drained < st.DRAIN_S:
            time.sleep(0.1)
        out["drain_s"] = time.monotonic() - drained
        out["t_end"] = time.time()
        out["records"] = client.finish()
        out["last"] = last
    connections.close_all()
    return out


def bench_console_trace_keepup(ctx: Context, *, searches: int = 250) -> dict[str, Any]:
    """One run stepping as fast as the runner can; does the live trace keep up?"""
    from django.db import connections

    budget = st._budget(ctx)
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    st._load_corpus()
    owner, token = st._user(f"bench-keepup-{tag}", "user")
    state = st._search_run(subject=f"bench-keepup-{tag}", owner=owner, searches=searches, tag=tag)
    connections.close_all()
    got = _follow(ctx, token, state.run_id, state.trace_seq, cap_at=started + budget - 20)
    counts = _order_and_gaps(got["records"], state.trace_seq, got["last"])
    lags, _delivered, _dups, _unmatched = _latencies(
        got["records"],
        got["commits"],
        [state.run_id],
        [0],
        {state.run_id: state.trace_seq},
        {state.run_id: got["last"]},
        got["t_end"],
    )
    if not lags:
        raise RuntimeError(f"nothing received; errors: {got['errors'][:3]}")
    steps_per_s = (searches + 1) / got["advance_s"] if got["advance_s"] else float("nan")
    how = (
        f"daphne (one process), {st._layer(ctx)}, {ctx.vendor}; one run of {searches} "
        f"search_public steps + a final advanced by the real runner in one thread of the "
        f"benchmark process as fast as it goes ({got['advance_s']:.2f} s, {steps_per_s:.0f} "
        f"steps/s{', cut short by cancel' if got['cancelled'] else ''}); one websocket client "
        f"(token auth, /ws/runs/<id>/trace/?after=<sequence at creation>) in a child process. "
        f"Lag = time.time() at receipt - time.time() in the store's on-commit hook; events "
        f"never received count as arriving at the end of a {got['drain_s']:.1f} s drain. "
        f"Order: sequences strictly increasing in receipt order."
    )
    if not ctx.redis_url:
        how += (
            " In-memory layer: the runner's doorbell cannot cross processes, so events reach "
            "daphne by the consumer's periodic catch-up (CATCH_UP_S = 1 s): the lag is that "
            "interval."
        )
    if got["errors"]:
        how += f" Errors: {got['errors'][:3]}."
    return {
        "console_trace_keepup": {
            **counts,
            "lag_p50_ms": round(percentile(lags, 50), 2),
            "lag_p95_ms": round(percentile(lags, 95), 2),
            "lag_max_ms": round(max(lags), 2),
            "steps_per_s": round(steps_per_s, 1),
            "how": how,
        }
    }
