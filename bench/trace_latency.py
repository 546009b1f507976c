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

from bench.harness import Context, percentile, summary
from bench.stack import (
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
from bench.ws_clients import _WsClients


def bench_trace_latency(ctx: Context) -> dict[str, Any]:
    """20 runs advanced at once by real runner steps (threads of this process); 100 websocket
    clients on a real daphne; latency = client receipt - commit of the event."""
    from django.db import connections

    from runs import models as m
    from runs import services
    from runs.domain.machine import TERMINAL

    budget = _budget(ctx)
    started = time.monotonic()
    n_runs, n_clients = 20, 100
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

    # Client c watches run c % 20 with the run owner's token: 5 clients per run.
    client_run = [run_ids[c % n_runs] for c in range(n_clients)]
    commits: dict[str, list[tuple[int, float]]] = {r: [] for r in run_ids}
    rings: list[float] = []
    errors: list[str] = []
    connect_note = ""
    env = _env(ctx)

    def advance(run_id: str, barrier: threading.Barrier) -> None:
        from agentconsole import wiring
        from runs.doorbell import ring_after_commit
        from runs.leases import lease_acquire, lease_release, new_owner

        log = commits[run_id]

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
                runner.store.on_commit_events = on_commit
                runner.advance(run_id)
            finally:
                lease_release(run_id=run_id, owner=owner)
        except Exception as exc:
            errors.append(f"{run_id}: {type(exc).__name__}: {exc}"[:300])
        finally:
            connections.close_all()

    with (
        contextlib.ExitStack() as stack,
        _counting("runs.doorbell") as doorbell_warnings,
        # channels_redis logs (INFO) each group_send that finds a member channel full (capacity
        # 100 messages): that doorbell is dropped for that consumer. Counted, not printed.
        _counting("channels_redis.core", logging.INFO, quiet=True) as over_capacity,
    ):
        stack.callback(_redis_cleanup, ctx, tag, run_ids)  # runs last: after daphne stopped
        port = _start_daphne(stack, env)
        specs = [
            (
                f"ws://127.0.0.1:{port}/ws/runs/{client_run[c]}/trace/?after={after[client_run[c]]}",
                owners[c % n_runs][1],
            )
            for c in range(n_clients)
        ]
        clients = _WsClients(specs, {**env, "LOG_LEVEL": "WARNING"})
        stack.callback(clients.stop)
        report = json.loads(clients.expect("ready", timeout=150).split(" ", 1)[1])
        watching = [c for c in range(n_clients) if c not in set(report["unconnected"])]
        connected = len(watching)
        if report["failed_attempts"]:
            connect_note = (
                f" {report['failed_attempts']} connection attempts failed and were retried "
                f"({report['errors']})."
            )
        time.sleep(1.5)  # let every consumer's first periodic catch-up pass
        barrier = threading.Barrier(n_runs + 1)
        threads = [
            threading.Thread(target=advance, args=(r, barrier), name=f"bench-advance-{i}")
            for i, r in enumerate(run_ids)
        ]
        for t in threads:
            t.start()
        barrier.wait(timeout=60)
        t0 = time.monotonic()
        cap = max(5.0, budget - (time.monotonic() - started) - 20)
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
        advance_s = time.monotonic() - t0
        # Wait until every client has every event (or the budget says stop): a backlog in the
        # server shows up as latency, not as missing samples.
        final_seq = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "trace_seq"))
        connections.close_all()
        expected = sum(final_seq[client_run[c]] - after[client_run[c]] for c in watching)
        t_drain = time.monotonic()
        drain_cap = max(3.0, min(DRAIN_S, budget - (time.monotonic() - started) - 10))
        while clients.received() < expected and time.monotonic() - t_drain < drain_cap:
            time.sleep(0.25)
        drain_s = time.monotonic() - t_drain
        t_end = time.time()
        records = clients.finish()
    connections.close_all()

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
    index = {r: ([s for s, _ in commits[r]], [t for _, t in commits[r]]) for r in run_ids}
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
    missing = len(latencies) - delivered
    events = sum(final_seq[r] - after[r] for r in run_ids)
    n_commits = sum(len(v) for v in commits.values())
    done = sum(1 for r in run_ids if statuses[r] in {s.value for s in TERMINAL})
    if not latencies:
        raise RuntimeError(f"no latency measured; errors: {errors[:3]}")
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
            f" The doorbell ring itself (runs/doorbell.py: async_to_sync(group_send) from the "
            f"runner thread, inside store.apply) took median "
            f"{summary(rings)['median'] * 1000:.2f} ms, max {max(rings) * 1000:.1f} ms."
        )
    dropped = [msg for msg in over_capacity.messages if "over capacity" in msg]
    if dropped:
        how += (
            f" {len(dropped)} group_sends found consumer channels over capacity (channels_redis:"
            f" those doorbells were dropped; the periodic catch-up delivers instead)."
        )
    if tool_failures:
        how += f" Tool calls that did not succeed: {dict(tool_failures)}."
    if errors or doorbell_warnings.messages:
        how += f" Errors: {(errors + doorbell_warnings.messages)[:3]}."
    return {
        "trace_latency_ms": {
            "p50": round(percentile(latencies, 50), 2),
            "p99": round(percentile(latencies, 99), 2),
            **_ms(latencies),
            "samples": len(latencies),
            "undelivered": missing,
            "clients": connected,
            "runs": n_runs,
            "target_p99": 50,
            "how": how,
        }
    }
