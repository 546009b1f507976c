"""``bench_trace_latency``: commit of a trace event -> its arrival at 100 websocket clients."""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import threading
import time
import uuid
from collections import Counter
from typing import Any

from bench.support.harness import Context, percentile, summary
from bench.support.stack import (
    DRAIN_S,
    _budget,
    _counting,
    _env,
    _layer,
    _load_corpus,
    _ms,
    _redis_cleanup,
    _search_run,
    _start_daphne,
    _user,
)
from bench.support.ws_clients import _WsClients

N_RUNS, N_CLIENTS = 20, 100


def _advance(
    run_id: str,
    barrier: threading.Barrier,
    log: list[tuple[int, float]],
    rings: list[float],
    errors: list[str],
) -> None:
    """One runner thread: advance the run with the store's on-commit hook timing each commit."""
    from django.db import connections

    from agentconsole import wiring
    from runs.engine.doorbell import ring_after_commit
    from runs.engine.leases import lease_acquire, lease_release, new_owner
    from runs.orm.store import OrmRunStore

    def on_commit(rid: str, seq: int, *, queues_changed: bool = False) -> None:
        # Runs right after COMMIT returned (transaction.on_commit), before the doorbell.
        now = time.time()
        log.append((seq, now))
        ring_after_commit(rid, seq, queues_changed=queues_changed)
        rings.append(time.time() - now)

    owner = new_owner()
    try:
        barrier.wait(timeout=60)
        if not lease_acquire(run_id=run_id, owner=owner):
            errors.append(f"{run_id}: lease taken")
            return
        try:
            runner = wiring.runner(owner)
            # The hook is the ORM store's (the port knows no doorbell): time it there.
            if not isinstance(runner.store, OrmRunStore):
                raise TypeError(f"the runner's store is a {type(runner.store).__name__}")
            runner.store.on_commit_events = on_commit
            runner.advance(run_id)
        finally:
            lease_release(run_id=run_id, owner=owner)
    except Exception as exc:
        errors.append(f"{run_id}: {type(exc).__name__}: {exc}"[:300])
    finally:
        connections.close_all()


def _run_all(
    run_ids: list[str],
    commits: dict[str, list[tuple[int, float]]],
    rings: list[float],
    errors: list[str],
    cap_at: float,
) -> tuple[float, bool]:
    """Advance every run at once in threads; cancel the rest at ``cap_at`` (monotonic).
    (seconds from the barrier to the last thread, whether runs were cut short)."""
    from runs import services

    barrier = threading.Barrier(len(run_ids) + 1)
    threads = [
        threading.Thread(
            target=_advance, args=(r, barrier, commits[r], rings, errors), name=f"bench-advance-{i}"
        )
        for i, r in enumerate(run_ids)
    ]
    for t in threads:
        t.start()
    barrier.wait(timeout=60)
    t0 = time.monotonic()
    cap = max(5.0, cap_at - time.monotonic())
    cancelled = False
    for t in threads:
        t.join(timeout=max(0.1, cap - (time.monotonic() - t0)))
    if any(t.is_alive() for t in threads):
        cancelled = True  # out of time: cancel the rest (the runner then stops by itself)
        for r in run_ids:
            with contextlib.suppress(Exception):
                services.run_cancel(run_id=r, by="bench", reason="benchmark time budget")
        for t in threads:
            t.join(timeout=30)
    return time.monotonic() - t0, cancelled


def _latencies(
    records: list[list[Any]],
    commits: dict[str, list[tuple[int, float]]],
    client_run: list[str],
    watching: list[int],
    after: dict[str, int],
    final_seq: dict[str, int],
    t_end: float,
) -> tuple[list[float], int, int, int]:
    """(latencies in ms, pairs delivered, duplicates, frames without a commit clock)."""
    index = {r: ([s for s, _ in v], [t for _, t in v]) for r, v in commits.items()}
    latencies: list[float] = []
    seen: set[tuple[int, int]] = set()
    unmatched = duplicates = 0
    for c, seq, _event, t in records:
        if (c, seq) in seen:
            duplicates += 1
            continue
        seen.add((c, seq))
        seqs, times = index[client_run[c]]
        k = bisect.bisect_left(seqs, seq)
        if k == len(seqs):
            unmatched += 1  # not committed by our runner threads (e.g. a cancel): no clock
            continue
        latencies.append((t - times[k]) * 1000)
    # Pairs never delivered within the wait count as arriving at its end: a lower bound, so an
    # overloaded server cannot look fast by dropping its slowest deliveries from the sample.
    delivered = len(latencies)
    for c in watching:
        run_id = client_run[c]
        seqs, times = index[run_id]
        for seq in range(after[run_id] + 1, final_seq[run_id] + 1):
            k = bisect.bisect_left(seqs, seq)
            if (c, seq) not in seen and k < len(seqs):
                latencies.append((t_end - times[k]) * 1000)
    return latencies, delivered, duplicates, unmatched


def _outcomes(run_ids: list[str]) -> tuple[dict[str, str], Counter[str], Counter[str]]:
    """(status per run, status/reason counts, counts of tool calls that did not succeed)."""
    from django.db import connections

    from runs import models as m

    statuses = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "status"))
    outcomes = Counter(
        f"{status}/{reason}"
        for status, reason in m.Run.objects.filter(pk__in=run_ids).values_list(
            "status", "stop_reason"
        )
    )
    tool_failures = Counter(
        f"{(outcome or {}).get('code')}: {(outcome or {}).get('message')}"[:120]
        for outcome in m.LedgerEntry.objects.filter(run_id__in=run_ids)
        .exclude(status="succeeded")
        .values_list("outcome", flat=True)
    )
    connections.close_all()
    return statuses, outcomes, tool_failures


def _connect_note(report: dict[str, Any]) -> str:
    if not report["failed_attempts"]:
        return ""
    return (
        f" {report['failed_attempts']} connection attempts failed and were retried "
        f"({report['errors']})."
    )


def _measure(
    ctx: Context,
    tag: str,
    owners: list[tuple[Any, str]],
    run_ids: list[str],
    after: dict[str, int],
    cap_at: float,
    drain_at: float,
    clients: int = N_CLIENTS,
) -> dict[str, Any]:
    """Daphne, ``clients`` websocket clients, the runner threads, the drain: everything the
    figure is made of. ``owners[i]`` (user, token) owns ``run_ids[i]``. ``cap_at`` /
    ``drain_at`` (monotonic): when to cut the runs short / stop waiting."""
    from django.db import connections

    from runs import models as m

    # Client c watches run c % len(run_ids) with the run owner's token (5 per run for the
    # trace figure: 100 clients, 20 runs).
    client_run = [run_ids[c % len(run_ids)] for c in range(clients)]
    out: dict[str, Any] = {"commits": {r: [] for r in run_ids}, "rings": [], "errors": []}
    env = _env(ctx)
    with (
        contextlib.ExitStack() as stack,
        _counting("runs.engine.doorbell") as doorbell_warnings,
        # channels_redis logs (INFO) each group_send that finds a member channel full (capacity
        # 100 messages): that doorbell is dropped for that consumer. Counted, not printed.
        _counting("channels_redis.core", logging.INFO, quiet=True) as over_capacity,
    ):
        stack.callback(_redis_cleanup, ctx, tag, run_ids)  # runs last: after daphne stopped
        port = _start_daphne(stack, env)
        specs = [
            (
                f"ws://127.0.0.1:{port}/ws/runs/{client_run[c]}/trace/?after={after[client_run[c]]}",
                owners[c % len(run_ids)][1],
            )
            for c in range(clients)
        ]
        ws = _WsClients(specs, {**env, "LOG_LEVEL": "WARNING"})
        stack.callback(ws.stop)
        report = json.loads(ws.expect("ready", timeout=150).split(" ", 1)[1])
        watching = [c for c in range(clients) if c not in set(report["unconnected"])]
        time.sleep(1.5)  # let every consumer's first periodic catch-up pass
        advance_s, cancelled = _run_all(
            run_ids, out["commits"], out["rings"], out["errors"], cap_at
        )
        # Wait until every client has every event (or the budget says stop): a backlog in the
        # server shows up as latency, not as missing samples.
        final_seq = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "trace_seq"))
        connections.close_all()
        expected = sum(final_seq[client_run[c]] - after[client_run[c]] for c in watching)
        t_drain = time.monotonic()
        drain_cap = max(3.0, min(DRAIN_S, drain_at - time.monotonic()))
        while ws.received() < expected and time.monotonic() - t_drain < drain_cap:
            time.sleep(0.25)
        drain_s = time.monotonic() - t_drain
        t_end = time.time()
        records = ws.finish()
    connections.close_all()
    out.update(
        client_run=client_run,
        watching=watching,
        connected=len(watching),
        connect_note=_connect_note(report),
        advance_s=advance_s,
        cancelled=cancelled,
        final_seq=final_seq,
        expected=expected,
        drain_s=drain_s,
        t_end=t_end,
        records=records,
        doorbell_warnings=doorbell_warnings.messages,
        over_capacity=over_capacity.messages,
    )
    return out


def bench_trace_latency(ctx: Context) -> dict[str, Any]:
    """20 runs advanced at once by real runner steps (threads of this process); 100 websocket
    clients on a real daphne; latency = client receipt - commit of the event."""
    from django.db import connections

    from runs.domain.machine import TERMINAL

    budget = _budget(ctx)
    started = time.monotonic()
    n_runs = N_RUNS
    searches = 12 if budget >= 60 else 4
    tag = uuid.uuid4().hex[:8]
    _load_corpus()
    owners = [_user(f"bench-trace-{tag}-{i}", "user") for i in range(n_runs)]
    run_ids, after = [], {}
    for i, (owner, _) in enumerate(owners):
        state = _search_run(
            subject=f"bench-trace-{tag}-{i}", owner=owner, searches=searches, tag=tag
        )
        run_ids.append(state.run_id)
        after[state.run_id] = state.trace_seq
    connections.close_all()

    got = _measure(
        ctx,
        tag,
        owners,
        run_ids,
        after,
        cap_at=started + budget - 20,
        drain_at=started + budget - 10,
    )
    statuses, outcomes, tool_failures = _outcomes(run_ids)
    latencies, delivered, duplicates, unmatched = _latencies(
        got["records"],
        got["commits"],
        got["client_run"],
        got["watching"],
        after,
        got["final_seq"],
        got["t_end"],
    )
    missing = len(latencies) - delivered
    events = sum(got["final_seq"][r] - after[r] for r in run_ids)
    n_commits = sum(len(v) for v in got["commits"].values())
    done = sum(1 for r in run_ids if statuses[r] in {s.value for s in TERMINAL})
    if not latencies:
        raise RuntimeError(f"no latency measured; errors: {got['errors'][:3]}")
    how = _how(
        ctx,
        got,
        searches=searches,
        n_commits=n_commits,
        events=events,
        done=done,
        outcomes=outcomes,
        delivered=delivered,
        duplicates=duplicates,
        unmatched=unmatched,
        missing=missing,
        tool_failures=tool_failures,
    )
    return {
        "trace_latency_ms": {
            "p50": round(percentile(latencies, 50), 2),
            "p99": round(percentile(latencies, 99), 2),
            **_ms(latencies),
            "samples": len(latencies),
            "undelivered": missing,
            "clients": got["connected"],
            "runs": n_runs,
            "target_p99": 50,
            "how": how,
        }
    }


def _how(
    ctx: Context,
    got: dict[str, Any],
    *,
    searches: int,
    n_commits: int,
    events: int,
    done: int,
    outcomes: Counter[str],
    delivered: int,
    duplicates: int,
    unmatched: int,
    missing: int,
    tool_failures: Counter[str],
) -> str:
    n_runs, n_clients = N_RUNS, N_CLIENTS
    advance_s, cancelled, connected = got["advance_s"], got["cancelled"], got["connected"]
    expected, drain_s, connect_note = got["expected"], got["drain_s"], got["connect_note"]
    rings, errors = got["rings"], got["errors"]
    how = (
        f"daphne -b 127.0.0.1 -p <port> agentconsole.asgi:application (one process), "
        f"{_layer(ctx)}, {ctx.vendor}; {n_runs} runs x ({searches} search_public steps over the "
        f"demo corpus + a final) advanced at once by real runner steps in {n_runs} threads of the "
        f"benchmark process ({n_commits} commits, {events} events, {advance_s:.1f} s, "
        f"{done}/{n_runs} runs terminal{', cut short by cancel' if cancelled else ''}: "
        f"{dict(outcomes)}); "
        f"{connected}/{n_clients} websocket clients (5 per run, token auth, "
        f"/ws/runs/<id>/trace/?after=<last>) in a separate process. Latency of each (event, "
        f"client) pair = time.time() at the client's receipt - time.time() in the store's "
        f"on-commit hook (right after COMMIT, before the doorbell rings); events of one commit "
        f"share its commit time. {delivered} of {expected} (event, client) pairs delivered "
        f"within {drain_s:.1f} s after the last commit ({duplicates} duplicates, {unmatched} "
        f"without a commit clock)"
        + (
            f"; the {missing} never delivered count as arriving at the end of that wait, so the "
            f"percentiles are lower bounds."
            if missing
            else "."
        )
        + connect_note
        + " The commit clock is read in the committing thread, which may wait for the GIL "
        "after COMMIT: a few ms late, hence a slightly negative minimum at times."
    )
    if not ctx.redis_url:
        how += (
            " With the in-memory layer the doorbell rung in this process cannot reach daphne: "
            "events arrive by the consumer's 1 s periodic catch-up (runs/consumers.py CATCH_UP_S),"
            " so this measures that interval, not the doorbell."
        )
    if rings:
        how += (
            f" The doorbell ring itself (runs/engine/doorbell.py: async_to_sync(group_send) from "
            f"the "
            f"runner thread, inside store.apply) took median "
            f"{summary(rings)['median'] * 1000:.2f} ms, max {max(rings) * 1000:.1f} ms."
        )
    dropped = [msg for msg in got["over_capacity"] if "over capacity" in msg]
    if dropped:
        how += (
            f" {len(dropped)} group_sends found consumer channels over capacity (channels_redis:"
            f" those doorbells were dropped; the periodic catch-up delivers instead)."
        )
    if tool_failures:
        how += f" Tool calls that did not succeed: {dict(tool_failures)}."
    if errors or got["doorbell_warnings"]:
        how += f" Errors: {(errors + got['doorbell_warnings'])[:3]}."
    return how
