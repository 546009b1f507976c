"""`make bench`: every figure of issues 6 and 11 in one run, on a private database that is dropped
at the end. PostgreSQL + Redis when DATABASE_URL / REDIS_URL are set, SQLite + in-memory otherwise.
Prints a table and writes bench/results.json (not committed).

``BENCH=name1,name2`` runs only those benchmarks (a function name, with or without its
``bench_`` prefix: ``BENCH=console_run_detail_ms,console_trace_keepup``)."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from bench.support.harness import ROOT, Context, private_database

# The whole run stops by itself within about 20 minutes: runs_in_flight (issue 22) needs up to
# 150 s for N=200 and 900 s for N=2000 (2,000 runs through the production processes on a
# 2-core machine, and the peer's 2,000); the others fit in their former 540 s.
BUDGET_S = 1200


def main() -> int:
    base = os.environ.get("DATABASE_URL") or f"sqlite:///{ROOT / 'var' / 'bench.sqlite3'}"
    url, drop = private_database(base)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentconsole.settings")
    # Production settings: DEBUG logs every query (and caps the log), which skews what we measure.
    os.environ["DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", "bench-" + os.urandom(16).hex())
    # The bench talks plain HTTP to its own daphne on 127.0.0.1: no redirect to HTTPS.
    os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
    # The benchmark process advances up to 20 runs in threads at once, each with a tool thread:
    # a connection pool as large as that (a web or worker process needs far fewer).
    os.environ.setdefault("DB_POOL_MAX_SIZE", "64")
    import django

    django.setup()
    from django.conf import settings

    _bench_settings(settings)
    from django.core.management import call_command
    from django.db import connection, connections

    results: dict[str, Any] = {}
    ctx = Context(
        database_url=url,
        redis_url=os.environ.get("REDIS_URL", ""),
        vendor="",
        deadline=time.monotonic() + BUDGET_S,
    )
    try:
        call_command("migrate", verbosity=0)
        ctx.vendor = connection.vendor
        from bench import core, peer, provenance, queue_page, telemetry

        # peer: LangGraph beside us (the optional `bench` extra; says so when it is missing).
        benches = [core.bench_gate, provenance.bench_provenance, core.bench_persisted_steps,
                   core.bench_step_growth, peer.bench_langgraph_peer,
                   telemetry.bench_otel_overhead, queue_page.bench_console_queue_ms]  # fmt: skip
        try:
            from bench import console, live, runs_in_flight

            benches += [live.bench_trace_latency, live.bench_approval_roundtrip,
                        live.bench_runs_list, live.bench_worker_scaling,
                        console.bench_console_run_detail_ms,
                        console.bench_console_trace_keepup,
                       runs_in_flight.bench_runs_in_flight]  # fmt: skip
        except ImportError as exc:
            ctx.notes.append(f"live benchmarks unavailable: {exc}")
        for bench in selected(benches, os.environ.get("BENCH", "")):
            if ctx.time_left() < 20:
                ctx.notes.append(f"{bench.__name__} skipped: time budget spent")
                continue
            started = time.monotonic()
            print(f"... {bench.__name__}", file=sys.stderr, flush=True)
            try:
                results.update(bench(ctx))
            except Exception as exc:  # one broken benchmark must not hide the others
                results[bench.__name__] = {"error": f"{type(exc).__name__}: {exc}"}
                traceback.print_exc()
            ctx.notes.append(f"{bench.__name__}: {time.monotonic() - started:.1f} s")
    finally:
        connections.close_all()
        drop()
    results["_meta"] = {
        "database": ctx.vendor,
        "channel_layer": "redis" if ctx.redis_url else "in-memory",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "notes": ctx.notes,
    }
    out = ROOT / "bench" / "results.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    _print(results)
    print(f"\nwritten: {out}")
    return 0


def _bench_settings(settings: Any) -> None:
    # Console pages are rendered in-process with no collectstatic step: static URLs as in
    # development (DEBUG=0 otherwise wants the hashed names of a collected manifest).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    # The database is new each run, so user ids repeat those of the last one, and the counts
    # the cache keeps per user for a minute (the run-creation rate) would carry over: a key
    # prefix of this run's own. (Two runs within a minute made the approval benchmark's
    # creates 429.)
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"bench-{os.getpid()}-{time.time_ns()}"}
        for name, config in settings.CACHES.items()
    }


def selected(benches: list[Callable[..., Any]], names: str) -> list[Callable[..., Any]]:
    """The benchmarks ``BENCH`` names (all when it is empty); an unknown name is an error."""
    wanted = {n.strip().removeprefix("bench_") for n in names.split(",") if n.strip()}
    if not wanted:
        return benches
    known = {b.__name__.removeprefix("bench_"): b for b in benches}
    unknown = sorted(wanted - known.keys())
    if unknown:
        raise SystemExit(f"BENCH: no benchmark {', '.join(unknown)}; known: {', '.join(known)}")
    return [b for name, b in known.items() if name in wanted]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if value < 100 else f"{value:,.0f}"
    return str(value)


def _print(results: dict[str, Any]) -> None:
    meta = results.get("_meta", {})
    print(f"\nagentconsole bench — {meta.get('database')} + {meta.get('channel_layer')} layer, "
          f"{meta.get('cpus')} cpus")  # fmt: skip
    for key, value in results.items():
        if key == "_meta":
            continue
        if not isinstance(value, dict):
            print(f"{key:<28} {_fmt(value)}")
            continue
        figures = {k: v for k, v in value.items() if k != "how" and not isinstance(v, dict)}
        line = "  ".join(f"{k}={_fmt(v)}" for k, v in figures.items())
        print(f"{key:<28} {line}")
        for sub, inner in value.items():
            if isinstance(inner, dict):
                inner_line = "  ".join(f"{k}={_fmt(v)}" for k, v in inner.items() if k != "how")
                print(f"{'':<4}{sub:<24} {inner_line}")
        if "how" in value:
            print(f"{'':<4}how: {value['how']}")
    for note in meta.get("notes", []):
        print(f"note: {note}")


if __name__ == "__main__":
    raise SystemExit(main())
