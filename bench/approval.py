"""``bench_approval_roundtrip``: the operator's approve request -> the resumed run's next trace
event on a websocket, with a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from bench.support.harness import Context, percentile, summary
from bench.support.stack import (
    SCENARIOS,
    _broker,
    _budget,
    _env,
    _layer,
    _ms,
    _private_broker,
    _redis_cleanup,
    _start_daphne,
    _start_workers,
    _user,
)

# confirmation_decide(enqueue=True) uses advance_run.delay(): the default queue.
QUEUE = "celery"


def _post_json(url: str, token: str, body: dict[str, Any]) -> tuple[int, float]:
    request = urllib.request.Request(  # noqa: S310 — our own server on 127.0.0.1
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:  # noqa: S310
            response.read()
            return response.status, time.time()
    except urllib.error.HTTPError as exc:
        return exc.code, time.time()


async def _approve_once(
    port: int, token: str, sample: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """Open the run's trace socket, POST the approval, wait for the first event after the
    decision's own two events (confirmation.decided, state.transitioned)."""
    from websockets.asyncio.client import connect

    uri = f"ws://127.0.0.1:{port}/ws/runs/{sample['run_id']}/trace/?after={sample['after']}"
    url = f"http://127.0.0.1:{port}/api/confirmations/{sample['confirmation_id']}/approve/"
    loop = asyncio.get_running_loop()
    async with connect(uri, additional_headers=[("Authorization", f"Token {token}")]) as ws:
        while json.loads(await asyncio.wait_for(ws.recv(), timeout)).get("type") != "replayed":
            pass
        t0 = time.time()
        post = loop.run_in_executor(
            None, _post_json, url, token, {"proposal_hash": sample["proposal_hash"]}
        )
        out: dict[str, Any] = {"t0": t0, "run_id": sample["run_id"]}
        decided = None
        deadline = time.monotonic() + timeout
        while True:
            raw = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
            t = time.time()
            msg = json.loads(raw)
            if msg.get("type") != "event":
                continue
            seq, event = msg["sequence"], msg["event"]
            if event == "confirmation.decided" and decided is None:
                decided = seq
                out["decided_ms"] = (t - t0) * 1000
                out["decided_seq"] = seq
            elif decided is not None and seq > decided + 1:
                out["resumed_ms"] = (t - t0) * 1000
                out["resumed_event"] = event
                out["resumed_seq"] = seq
                out["resumed_at"] = t
                break
        status, t_post = await post
        out["post_status"] = status
        out["post_ms"] = (t_post - t0) * 1000
        return out


def _waiting_samples(tag: str, owner: Any, n: int) -> list[dict[str, Any]]:
    """``n`` runs of the s15 scenario, each advanced in-process to waiting_confirmation."""
    from django.db import connections

    from runs import selectors, services
    from runs.domain.machine import Status
    from runs.start.scenarios import parse_scenario

    scenario = parse_scenario((SCENARIOS / "s15-missing-confirmation.json").read_bytes())
    # The file's 60 s deadline could pass while the benchmark waits: give the runs an hour.
    budgets = scenario.budgets.model_copy(update={"deadline_ms": 3_600_000})
    samples = []
    for i in range(n):
        subject = f"bench-approve-{tag}-{i}"
        grants = []
        for g in scenario.grants:
            grant = g.model_dump(exclude_unset=True)
            if grant["capability"] == "memory:write":
                grant["resource_scope"] = subject  # the run's own subject, as in the file
            grants.append(grant)
        created = services.run_create(
            subject=subject,
            goal=scenario.goal,
            budgets=budgets,
            grants=grants,
            planner={"kind": "fixture", "outputs": scenario.planner},
            owner=owner,
        )
        state = services.run_advance(run_id=created.run_id)
        if state is None or state.status is not Status.WAITING_CONFIRMATION:
            raise RuntimeError(f"s15 run did not wait for a confirmation: {state}")
        pending = selectors.confirmation_get(confirmation_id=state.pending_confirmation_id)
        samples.append(
            {
                "run_id": state.run_id,
                "after": state.trace_seq,
                "confirmation_id": pending.pk,
                "proposal_hash": pending.proposal_hash,
            }
        )
    connections.close_all()
    return samples


def _approve_all(
    ctx: Context, tag: str, samples: list[dict[str, Any]], op_token: str, cap_at: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """Start a worker and daphne, approve each sample in turn until ``cap_at`` (monotonic)."""
    from django.db import connections

    results: list[dict[str, Any]] = []
    failures: list[str] = []
    try:
        with contextlib.ExitStack() as stack:
            extra = stack.enter_context(_private_broker(ctx))
            env = _env(ctx, **extra)
            # With Redis the default queue is shared with anything else consuming "celery" on
            # that database; with the filesystem broker the folder is private.
            workers = _start_workers(stack, env, QUEUE, [f"bench-approve-{tag}"])
            port = _start_daphne(stack, env)
            cap = cap_at - time.monotonic()

            async def all_samples() -> None:
                t_start = time.monotonic()
                for s in samples:
                    if time.monotonic() - t_start > cap:
                        failures.append("time budget spent")
                        break
                    try:
                        results.append(await _approve_once(port, op_token, s, timeout=10))
                    except Exception as exc:
                        failures.append(f"{s['run_id']}: {type(exc).__name__}: {exc}"[:200])

            asyncio.run(all_samples())
            if not all(w.alive() for w in workers):
                failures.append(f"worker died: {workers[0].tail(5)}")
    finally:
        _redis_cleanup(ctx, tag, {s["run_id"] for s in samples})
        connections.close_all()
    return results, failures


def _legs(measured: list[dict[str, Any]]) -> dict[str, float]:
    """Where the time goes, from the clocks the processes wrote (same host): TraceEvent.created_at
    is taken by the writing process just before its INSERT. Medians per leg."""
    from django.db import connections

    from runs import models as m

    legs: dict[str, list[float]] = {"daphne": [], "queue_and_worker": [], "delivery": []}
    for r in measured:
        if "resumed_seq" not in r:
            continue
        stamps = dict(
            m.TraceEvent.objects.filter(
                run_id=r["run_id"], sequence__in=[r["decided_seq"], r["resumed_seq"]]
            ).values_list("sequence", "created_at")
        )
        decided_at = stamps[r["decided_seq"]].timestamp()
        resumed_at = stamps[r["resumed_seq"]].timestamp()
        legs["daphne"].append((decided_at - r["t0"]) * 1000)
        legs["queue_and_worker"].append((resumed_at - decided_at) * 1000)
        legs["delivery"].append((r["resumed_at"] - resumed_at) * 1000)
    connections.close_all()
    return {k: round(summary(v)["median"], 1) for k, v in legs.items() if v}


def bench_approval_roundtrip(ctx: Context) -> dict[str, Any]:
    """Runs waiting for a confirmation (s15 scenario); per sample: websocket open on the run,
    POST approve over HTTP to daphne, first trace event the worker writes for the resumed run."""
    budget = _budget(ctx)
    started = time.monotonic()
    warmups, wanted = 2, 20
    tag = uuid.uuid4().hex[:8]
    _, op_token = _user(f"bench-approve-op-{tag}", "operator")
    owner, _ = _user(f"bench-approve-owner-{tag}", "user")
    samples = _waiting_samples(tag, owner, warmups + wanted)
    results, failures = _approve_all(ctx, tag, samples, op_token, started + budget - 15)

    measured = results[warmups:] if len(results) > warmups else results
    resumed = [r["resumed_ms"] for r in measured if "resumed_ms" in r]
    if not resumed:
        raise RuntimeError(f"no approval round trip measured: {failures[:3]}")
    breakdown = _legs(measured)
    how = _how(ctx, samples, measured, resumed, breakdown, warmups, failures)
    return {
        "approval_roundtrip_ms": {
            "p50": round(percentile(resumed, 50), 2),
            **_ms(resumed),
            "p99": round(percentile(resumed, 99), 2),
            "samples": len(resumed),
            "legs_median_ms": breakdown,
            "target_p50": 25,
            "target_p99": 50,
            "how": how,
        }
    }


def _how(
    ctx: Context,
    samples: list[dict[str, Any]],
    measured: list[dict[str, Any]],
    resumed: list[float],
    breakdown: dict[str, float],
    warmups: int,
    failures: list[str],
) -> str:
    queue_name = QUEUE
    first_events = sorted({r["resumed_event"] for r in measured if "resumed_event" in r})
    how = (
        f"daphne (HTTP + websocket) and one Celery worker (prefork -c 1, -Q {queue_name}: the "
        f"default queue, where confirmation_decide(enqueue=True) puts runs.advance_run; "
        f"{_broker(ctx)}), {_layer(ctx)}, {ctx.vendor}. {len(samples)} runs of "
        f"s15-missing-confirmation.json (own subject each, deadline 1 h) created and advanced "
        f"in-process to waiting_confirmation. Per run, sequentially: websocket on "
        f"/ws/runs/<id>/trace/?after=<last> (operator token) until 'replayed', then the clock "
        f"starts at the POST /api/confirmations/<id>/approve/ {{proposal_hash}} (operator token) "
        f"and stops at the websocket receipt of the first event after the decision's two "
        f"events (confirmation.decided, state.transitioned): the worker's first commit for the "
        f"resumed run, whose first event is {first_events} (the same commit holds "
        f"policy.confirmation.checked and tool.started). {warmups} warm-up samples dropped; "
        f"{len(resumed)} measured. POST response median "
        f"{summary([r['post_ms'] for r in measured])['median']:.1f} ms; decided event median "
        f"{summary([r.get('decided_ms', 0.0) for r in measured])['median']:.1f} ms. Medians of "
        f"the legs (from TraceEvent.created_at): POST sent -> decision written in daphne "
        f"{breakdown.get('daphne')} ms; -> the worker's first event written (broker, task "
        f"pickup, lease, load, decide) {breakdown.get('queue_and_worker')} ms; -> received on "
        f"the websocket (commit, doorbell, consumer catch-up) {breakdown.get('delivery')} ms."
    )
    if not ctx.redis_url:
        how += (
            " In-memory layer: the worker's doorbell cannot reach daphne, so its events arrive by"
            " the consumer's 1 s periodic catch-up, whose ticker starts when the socket opens;"
            " the POST follows the replay at once, so the figure is about that first tick."
        )
    if failures:
        how += f" Failures: {failures[:3]}."
    return how
