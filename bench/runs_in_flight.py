"""``bench_runs_in_flight`` (issue 22 item 6): N runs waiting on a slow model at once, on the
production processes, beside a LangGraph peer on the same slow model and the same database.

Ours: ``scripts/web.sh``, ``scripts/worker.sh`` and ``scripts/gateway.sh`` started as a supervisor
would (each its own process group) on the bench's private database, a private Celery queue on Redis,
and the slow OpenAI-compatible server (``bench.support.slow_model``, 1 s per completion) as the
model endpoint. N runs of two model calls and one ``search_public`` call over the demo corpus are
created through ``POST /api/runs/``, all at once, each on a connection of its own (``bench.burst``),
spread over N/5 users so the per-user limits (create rate, active runs) do not bite. Figures: wall
time (first create sent → last run finished), peak model calls in flight (seen by the slow server),
peak resident memory of the worker and gateway process trees (summed, sampled from /proc), per-run
latency p50/p99, lost runs, create responses by status.

The peer: ``bench.peer_in_flight`` in a process of its own (LangGraph, ``AsyncPostgresSaver``,
N concurrent invocations, same slow server, same corpus table).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench import burst
from bench.support import proc_stats
from bench.support.harness import ROOT, Context, percentile
from bench.support.slow_model import SlowModel
from bench.support.stack import (
    START_TIMEOUT_S,
    _env,
    _free_port,
    _load_corpus,
    _Proc,
    _user,
    forget_queue,
)

SIZES = (200, 2000)
DELAY_S = 1.0  # the slow model's time per completion
PER_USER = 5  # runs per user: under the default create rate (30/min) and active runs (10)
WORKER_CONCURRENCY = os.environ.get("BENCH_RIF_WORKER_CONCURRENCY", "4")
# Seconds each size may take at most, ours and the peer's together (start, creates, runs, stop).
WINDOW_S = {200: 150.0, 2000: 900.0}
ENDPOINT = "slow"
GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 10}


# --- our stack ------------------------------------------------------------------------------


def _endpoints(model: SlowModel, n: int) -> dict[str, dict[str, Any]]:
    # max_in_flight >= N: the endpoint's limit is not what this benchmark measures.
    return {
        ENDPOINT: {
            "base_url": model.base_url,
            "model": "slow-model",
            "timeout_s": 60.0,
            "max_attempts": 3,
            "max_in_flight": n,
        }
    }


def _script(name: str, env: dict[str, str]) -> _Proc:
    return _Proc(name, [str(ROOT / "scripts" / f"{name}.sh")], env)


def _wait(what: str, ready: Any, procs: list[_Proc]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited:\n{p.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready:\n" + "\n".join(p.tail() for p in procs))
        time.sleep(0.2)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _worker_ready(name: str) -> bool:
    from agentconsole.celery import app

    return bool(app.control.ping(destination=[name], timeout=1.0))


def _start(stack: contextlib.ExitStack, env: dict[str, str], worker: str) -> dict[str, _Proc]:
    procs = {name: _script(name, env) for name in ("web", "worker", "gateway")}
    for p in procs.values():
        stack.callback(p.stop)
    port = int(env["PORT"])
    _wait("web", lambda: _healthy(port), [procs["web"]])
    _wait("worker", lambda: _worker_ready(worker), [procs["worker"]])
    _wait("gateway", lambda: "serving" in procs["gateway"].text(), [procs["gateway"]])
    return procs


def _requests(tag: str, n: int) -> list[burst.Request]:
    tokens = [_user(f"rif-{tag}-{i}", "operator")[1] for i in range((n + PER_USER - 1) // PER_USER)]
    return [
        burst.Request(
            "POST",
            "/api/runs/",
            {"Authorization": f"Token {tokens[i // PER_USER]}"},
            {
                "goal": f"rif {tag} {i}: what happens after the retries are exhausted?",
                "budgets": {"max_steps": 6, "deadline_ms": 600_000},
                "grants": [GRANT],
                "planner": {"kind": "openai", "endpoint": ENDPOINT},
            },
        )
        for i in range(n)
    ]


def _finished(run_ids: list[str], window_s: float, started: float) -> None:
    from runs import models as m
    from runs.domain.machine import TERMINAL

    terminal = [s.value for s in TERMINAL]
    while time.monotonic() - started < window_s:
        if m.Run.objects.filter(pk__in=run_ids, status__in=terminal).count() == len(run_ids):
            return
        time.sleep(0.25)


def _outcome(run_ids: list[str], sent: dict[str, float]) -> dict[str, Any]:
    """Per run: created (the row), finished (its last trace event, once terminal)."""
    from django.db.models import Max

    from runs import models as m
    from runs.domain.machine import TERMINAL

    terminal = [s.value for s in TERMINAL]
    rows = m.Run.objects.filter(pk__in=run_ids).values_list("id", "status", "created_at")
    last = dict(
        m.TraceEvent.objects.filter(run_id__in=run_ids, run__status__in=terminal)
        .values("run_id")
        .annotate(t=Max("created_at"))
        .values_list("run_id", "t")
    )
    latencies: list[float] = []
    from_sent: list[float] = []
    completed, statuses = 0, dict[str, int]()
    for run_id, status, created in rows:
        statuses[status] = statuses.get(status, 0) + 1
        if status == "completed" and run_id in last:
            completed += 1
            latencies.append((last[run_id] - created).total_seconds())
            from_sent.append(last[run_id].timestamp() - sent[run_id])
    ends = [t.timestamp() for t in last.values()]
    return {
        "latencies": latencies,
        "from_sent": from_sent,
        "completed": completed,
        "statuses": statuses,
        "last_end": max(ends) if ends else float("nan"),
    }


def _ours(ctx: Context, model: SlowModel, n: int, window_s: float) -> dict[str, Any]:
    from django.db import connections

    tag = uuid.uuid4().hex[:8]
    queue, worker = f"bench-rif-{tag}", f"bench-rif-{tag}@bench"
    env = _env(
        ctx,
        AGENTCONSOLE_QUEUE=queue,
        AGENTCONSOLE_MODEL_ENDPOINTS=json.dumps(_endpoints(model, n)),
        AGENTCONSOLE_BIN=str(Path(sys.executable).parent),
        PORT=str(_free_port()),
        WORKER_CONCURRENCY=WORKER_CONCURRENCY,
        WORKER_NAME=worker,
        # All N creates come at once from one client: they wait their turn in the web process
        # (agentconsole/ops/admission.py) for as long as the size's window, rather than being told
        # to retry after WEB_QUEUE_TIMEOUT_S (60 s by default; 2,000 creates take about that).
        WEB_QUEUE_TIMEOUT_S=str(window_s),
    )
    requests = _requests(tag, n)
    connections.close_all()
    try:
        with contextlib.ExitStack() as stack:
            procs = _start(stack, env, worker)
            model.total = model.peak_in_flight = 0
            sampler = proc_stats.Sampler(
                {
                    "workers_gateway": {procs["worker"].popen.pid, procs["gateway"].popen.pid},
                    "web": {procs["web"].popen.pid},
                    "gateway": {procs["gateway"].popen.pid},
                }
            )
            sampler.start()
            cpu_before, usage_before = proc_stats.cpu_seconds(sampler.groups), proc_stats.own_cpu()
            started, t0 = time.monotonic(), time.time()
            outcomes = asyncio.run(burst.send_all("127.0.0.1", int(env["PORT"]), requests))
            created_s = time.time() - t0
            sent = {o.body["run_id"]: o.sent_at for o in outcomes if o.status == 201}
            _finished(list(sent), window_s, started)
            peak = sampler.stop()
            cpu = proc_stats.cpu_delta(cpu_before, proc_stats.cpu_seconds(sampler.groups))
            cpu["bench_client_and_model"] = round(proc_stats.own_cpu() - usage_before, 1)
            out = _outcome(list(sent), sent)
            out["phases"] = _phases(list(sent))
            served = model.total
            peak_calls = model.peak_in_flight
            alive = {name: p.alive() for name, p in procs.items()}
    finally:
        forget_queue(ctx.redis_url, queue)
        connections.close_all()
    return {
        **out,
        "creates": burst.tally(outcomes),
        "create_s": created_s,
        "wall_s": out["last_end"] - t0,
        "peak_rss": peak,
        "cpu_s": cpu,
        "model_requests": served,
        "peak_in_flight": peak_calls,
        "alive_at_end": alive,
    }


# --- the peer --------------------------------------------------------------------------------


def _peer(ctx: Context, model: SlowModel, n: int, window_s: float) -> dict[str, Any]:
    model.total = model.peak_in_flight = 0
    argv = [sys.executable, "-m", "bench.peer_in_flight", "--n", str(n)]
    argv += ["--base-url", model.base_url, "--database-url", ctx.database_url]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    servers, usage = proc_stats.cpu_seconds({}), resource.getrusage(resource.RUSAGE_CHILDREN)
    own = proc_stats.own_cpu()
    try:
        done = subprocess.run(  # noqa: S603 — our own module
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=window_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"the LangGraph peer did not finish {n} runs in {window_s:.0f} s"
        ) from None
    if done.returncode != 0:
        raise RuntimeError(f"the LangGraph peer failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {k: round(v - servers[k], 1) for k, v in proc_stats.cpu_seconds({}).items()}
    cpu["peer"] = round(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime, 1)
    cpu["bench_model"] = round(proc_stats.own_cpu() - own, 1)
    return {
        **result,
        "cpu_s": cpu,
        "peak_in_flight": model.peak_in_flight,
        "model_requests": model.total,
    }


# --- figures ---------------------------------------------------------------------------------


def _mb(n_bytes: float) -> float:
    return round(n_bytes / 2**20, 1)


def _figures(n: int, ours: dict[str, Any], peer: dict[str, Any] | None) -> dict[str, Any]:
    # Lost: created (201) and not completed. A create refused (429, 503) or reset is counted in
    # ``creates`` and fails the target too: every one of the N runs must finish.
    created = ours["creates"].get("201", 0)
    lost = created - ours["completed"]
    rss = ours["peak_rss"]
    fig: dict[str, Any] = {
        "wall_s": round(ours["wall_s"], 2),
        "create_s": round(ours["create_s"], 2),
        "peak_in_flight": ours["peak_in_flight"],
        "peak_rss_workers_gateway_mb": _mb(rss["workers_gateway"]),
        "peak_pss_workers_gateway_mb": _mb(rss["workers_gateway_pss"]),
        "peak_rss_gateway_mb": _mb(rss["gateway"]),
        "peak_rss_web_mb": _mb(rss["web"]),
        "p50_s": round(percentile(ours["latencies"], 50), 2),
        "p99_s": round(percentile(ours["latencies"], 99), 2),
        "p50_from_sent_s": round(percentile(ours["from_sent"], 50), 2),
        "p99_from_sent_s": round(percentile(ours["from_sent"], 99), 2),
        "created": created,
        "lost": lost,
        "model_requests": ours["model_requests"],
        "creates": ours["creates"],
        "burst_resets": ours["creates"].get("reset", 0),
        "run_statuses": ours["statuses"],
        "phases_p50_s": ours["phases"],
        "cpu_s": ours["cpu_s"],
    }
    if peer is None or "error" in peer:
        why = "LangGraph is not installed: pip install -e '.[bench]'"
        fig["peer"] = {"skipped": why} if peer is None else {"error": peer["error"]}
        fig["met"] = False
        return fig
    fig["peer"] = {
        "wall_s": round(peer["wall_s"], 2),
        "peak_in_flight": peer["peak_in_flight"],
        "peak_rss_mb": round(peer["peak_rss_kb"] / 1024, 1),
        "p50_s": round(percentile(peer["latencies_s"], 50), 2),
        "p99_s": round(percentile(peer["latencies_s"], 99), 2),
        "lost": peer["lost"],
        "model_requests": peer["model_requests"],
        "cpu_s": peer["cpu_s"],
    }
    ratio = ours["wall_s"] / peer["wall_s"]
    fig["wall_vs_peer"] = round(ratio, 2)
    limit = 1.5 if n <= 200 else 2.0
    fig["target"] = {"wall_vs_peer_max": limit, "lost": 0}
    checks = [ratio <= limit, lost == 0, created == n]
    if n >= 2000:
        fig["target"]["rss_workers_gateway_max_mb"] = 1024
        checks.append(rss["workers_gateway"] <= 2**30)
    fig["met"] = all(checks)
    return fig


def _how(n: int) -> str:
    return (
        f"N = {n} runs, each 2 model calls + 1 search_public over the "
        f"demo corpus; slow OpenAI-compatible server (bench.support.slow_model, {DELAY_S:g} s per "
        "completion, in the bench process). Ours: scripts/web.sh (daphne, backlog 4096), "
        f"scripts/worker.sh (WORKER_CONCURRENCY={WORKER_CONCURRENCY}), scripts/gateway.sh, "
        "PostgreSQL + Redis, a private queue; endpoint max_in_flight = N (so the endpoint's "
        "limit does not bind); runs created by POST /api/runs/, all N at once, one connection "
        f"each, {PER_USER} runs per user (the default create rate and active-run limits hold and "
        "do not bite). wall: first create sent -> last run's last trace event; p50/p99: run "
        "row created -> last trace event (from_sent: from the client's send); peak RSS: sum of "
        f"the process groups' resident memory, sampled every {proc_stats.SAMPLE_S} s from /proc; "
        "burst_resets: create connections reset by the web process. Peer: LangGraph graph "
        "model -> tool (same search, same corpus table) -> model -> end, AsyncPostgresSaver "
        "durability=sync, AsyncOpenAI, N concurrent ainvoke in one asyncio process; RSS: its "
        "ru_maxrss; wall: first invoke -> last done. Both sides load the same machine (2 cpus "
        "shared) in turn, ours first."
    )


def _has_langgraph() -> bool:
    try:
        import langgraph.checkpoint.postgres.aio  # noqa: F401
    except ImportError:
        return False
    return True


def bench_runs_in_flight(ctx: Context) -> dict[str, Any]:
    if ctx.vendor != "postgresql" or not ctx.redis_url:
        return {
            "runs_in_flight": {"skipped": "needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL)"}
        }
    sizes = [int(s) for s in os.environ.get("BENCH_RIF_SIZES", "").split(",") if s] or SIZES
    _load_corpus()
    peer_ok = _has_langgraph()
    model = SlowModel(delay_s=DELAY_S).start()
    out: dict[str, Any] = {}
    try:
        for n in sizes:
            window = WINDOW_S.get(n, 900.0)
            if ctx.time_left() < window + 30:
                ctx.notes.append(f"runs_in_flight N={n} skipped: {ctx.time_left():.0f} s left")
                continue
            ours = _ours(ctx, model, n, window * 0.6)
            peer: dict[str, Any] | None = None
            if peer_ok:
                try:
                    peer = _peer(ctx, model, n, window * 0.4)
                except RuntimeError as exc:  # ours are measured: keep them, say what failed
                    peer = {"error": str(exc)}
            out[f"runs_in_flight_{n}"] = {**_figures(n, ours, peer), "how": _how(n)}
    finally:
        model.stop()
    return out


def _phases(run_ids: list[str]) -> dict[str, float]:
    """Where a run's time goes (median seconds over the completed runs): created → its first
    request recorded (queue + a worker's first step), request → sent (the gateway's claim),
    the model, sent → recorded (the gateway's settle), reply → the next request recorded (the
    run back to the queue + a worker's step with the tool), and the last reply → finished."""
    from django.db.models import Max

    from runs import models as m

    created = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "created_at"))
    finished = dict(
        m.TraceEvent.objects.filter(run_id__in=run_ids, run__status="completed")
        .values("run_id")
        .annotate(t=Max("created_at"))
        .values_list("run_id", "t")
    )
    calls = {
        (run, step): (made, answered)
        for run, step, made, answered in m.ModelCall.objects.filter(run_id__in=run_ids).values_list(
            "run_id", "step", "created_at", "answered_at"
        )
    }
    sends = {
        call: (started, ended, latency)
        for call, started, ended, latency in m.CallAttempt.objects.filter(
            call__run_id__in=run_ids, outcome="answered"
        ).values_list("call_id", "started_at", "finished_at", "latency_ms")
    }
    spans: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        spans.setdefault(name, []).append(seconds)

    for run_id, end in finished.items():
        steps = sorted(step for run, step in calls if run == run_id)
        before = created[run_id]
        for k, step in enumerate(steps, 1):
            made, answered = calls[(run_id, step)]
            started, ended, latency = sends.get(f"{run_id}:s{step}", (None, None, None))
            if answered is None or started is None or ended is None or latency is None:
                continue
            add(f"to_request_{k}", (made - before).total_seconds())
            add(f"claim_{k}", (started - made).total_seconds())
            add(f"model_{k}", latency / 1000)
            add(f"settle_{k}", (ended - started).total_seconds() - latency / 1000)
            before = answered
        add("to_end", (end - before).total_seconds())
    return {name: round(percentile(v, 50), 3) for name, v in spans.items()}
