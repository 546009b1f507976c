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

import itertools
import os
import time
import uuid
from typing import Any

from bench.support import stack as st
from bench.support.harness import Context, percentile
from bench.trace_latency import _latencies, _measure

DETAIL_EVENTS = 1_000
DETAIL_PATH = "/runs/{run_id}/"
# A search step writes 9 trace events (planner output, proposal received, its provenance,
# schema, capability, confirmation, tool started, tool completed, result validated); the run's
# start and end a few.
EVENTS_PER_SEARCH = 9


def _run_with_events(owner: Any, tag: str, events: int) -> tuple[str, int, int]:
    """A run advanced to its end in-process by the real runner, with at least ``events`` trace
    events: (run id, its event count, its search steps)."""
    from runs import services

    searches = events // EVENTS_PER_SEARCH
    state = st._search_run(subject=f"bench-detail-{tag}", owner=owner, searches=searches, tag=tag)
    state = services.run_advance(run_id=state.run_id)
    if state is None:
        raise RuntimeError("the run's lease was taken: nothing else should advance it")
    return state.run_id, state.trace_seq, searches


def bench_console_run_detail_ms(ctx: Context, *, reps: int = 30, warm: int = 3) -> dict[str, Any]:
    """Server time of the run-detail page of a run with 1,000 trace events."""
    from django.db import connections
    from django.test import Client

    from runs import models as m

    tag = uuid.uuid4().hex[:8]
    st._load_corpus()
    owner, _token = st._user(f"bench-detail-{tag}", "user")
    made = time.monotonic()
    run_id, events, searches = _run_with_events(owner, tag, DETAIL_EVENTS)
    made_s = time.monotonic() - made
    path = os.environ.get("BENCH_RUN_DETAIL_PATH", DETAIL_PATH).format(run_id=run_id)
    client = Client()
    client.force_login(owner)
    try:
        hint = "(is the page built on this branch? BENCH_RUN_DETAIL_PATH names another one)"
        times, captured, response = st._time_get(client, path, warm, reps, hint)
    finally:
        connections.close_all()
    queries, size = len(captured), len(response.content)
    observations = m.Observation.objects.filter(run_id=run_id).count()
    how = (
        f"one run of {events} trace events and {observations} observations, made by real "
        f"runner steps in-process ({searches} search_public steps over the "
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


def _counts(
    records: list[list[Any]], written: int, delivered: int, duplicates: int, unmatched: int
) -> dict[str, Any]:
    """What one client received, in receipt order: counts, lost, duplicates, order kept
    (``delivered``, ``duplicates``, ``unmatched``: as ``_latencies`` counted them)."""
    seqs = [seq for _client, seq, _event, _t in records]
    return {
        "written": written,
        "received": len(seqs),
        "lost": written - delivered - unmatched,
        "duplicates": duplicates,
        "order_kept": all(a < b for a, b in itertools.pairwise(seqs)),
    }


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
    run_id, after = state.run_id, {state.run_id: state.trace_seq}
    got = _measure(
        ctx,
        f"keepup-{run_id}",
        [(owner, token)],
        [run_id],
        after,
        cap_at=started + budget - 20,
        drain_at=started + budget - 10,
        clients=1,
    )
    if not got["connected"]:
        raise RuntimeError(f"the websocket client did not connect: {got['connect_note']}")
    lags, delivered, duplicates, unmatched = _latencies(
        got["records"],
        got["commits"],
        got["client_run"],
        got["watching"],
        after,
        got["final_seq"],
        got["t_end"],
    )
    if not lags:
        raise RuntimeError(f"nothing received; errors: {got['errors'][:3]}")
    written = got["final_seq"][run_id] - state.trace_seq
    counts = _counts(got["records"], written, delivered, duplicates, unmatched)
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
