"""`make soak`: many runs on PostgreSQL + Redis while workers are killed with SIGKILL.

1. A private PostgreSQL database (dropped at the end) and a private Celery queue on Redis (its
   keys deleted at the end); refuses SQLite.
2. 2 web processes (daphne), 3 worker processes (``celery -A agentconsole worker``, Celery
   hostnames ``soak-w1..3``) and a beat running the sweeper, all with the soak's tools
   (``soak.tools``) and short lease/sweep intervals.
3. ``SOAK_RUNS`` runs created through ``POST /api/runs/`` spread over both web processes; an
   approver approves every pending confirmation through ``POST /api/confirmations/<id>/approve/``
   with the hash it was shown, as an operator, for as long as the soak lasts.
4. ``SOAK_KILLS`` times, at random intervals over ``SOAK_SECONDS``: SIGKILL a random worker's
   process group, note the runs it held, restart it under the same hostname.
5. Drain: wait (bounded by ``SOAK_DRAIN_S``) until every run is terminal or waits for a person.
6. Check (``soak.checks``), write ``soak/results.json`` (or ``SOAK_RESULTS``), print a table;
   exit 1 if a check failed, 2 if the soak could not run.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.support.harness import ROOT, percentile, private_database
from soak import stack as procs
from soak.kills import Kill, kill_phase, recoveries
from soak.stack import SoakError
from soak.timeline import Timeline
from soak.traffic import POLL_S, Api, Approver, create_runs

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"


@dataclass(frozen=True)
class Config:
    runs: int
    kills: int
    seconds: float  # the kill phase
    drain_s: float  # after the last kill: how long runs may take to settle
    min_up_s: float  # a worker is killed only once it has listened this long
    webs: int
    workers: int
    seed: int
    lease_ttl_s: float
    sweep_interval_s: float
    results: Path
    keep_db: bool

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Config:
        return cls(
            runs=int(env.get("SOAK_RUNS", "200")),
            kills=int(env.get("SOAK_KILLS", "100")),
            seconds=float(env.get("SOAK_SECONDS", "180")),
            drain_s=float(env.get("SOAK_DRAIN_S", "150")),
            min_up_s=float(env.get("SOAK_MIN_UP_S", "2")),
            webs=int(env.get("SOAK_WEB", "2")),
            workers=int(env.get("SOAK_WORKERS", "3")),
            seed=int(env.get("SOAK_SEED") or random.SystemRandom().randrange(1 << 30)),
            lease_ttl_s=float(env.get("SOAK_LEASE_TTL_S", "3")),
            sweep_interval_s=float(env.get("SOAK_SWEEP_INTERVAL_S", "1")),
            results=Path(env.get("SOAK_RESULTS") or ROOT / "soak" / "results.json"),
            keep_db=env.get("SOAK_KEEP_DB", "") == "1",
        )


# --- preconditions ---------------------------------------------------------------------------


def servers(env: dict[str, str]) -> tuple[str, str]:
    """The PostgreSQL and Redis servers to use; refuse SQLite and unreachable servers."""
    database_url = env.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    redis_url = env.get("REDIS_URL") or DEFAULT_REDIS_URL
    if not database_url.startswith(("postgres://", "postgresql://")):
        raise SoakError(
            f"the soak needs PostgreSQL (DATABASE_URL={database_url!r}): many processes write "
            "at once, which SQLite's one writer cannot show. Set DATABASE_URL=postgres://…"
        )
    import psycopg
    import redis

    try:
        with psycopg.connect(database_url, connect_timeout=5):
            pass
    except psycopg.Error as exc:
        raise SoakError(f"PostgreSQL at {database_url} is not reachable: {exc}") from None
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise SoakError(f"Redis at {redis_url} is not reachable: {exc}") from None
    finally:
        client.close()
    return database_url, redis_url


# --- the soak ----------------------------------------------------------------------------------


def hold_for(cfg: Config) -> int:
    """A tool call's average duration (ms): 3 calls per run spread over the workers fill 60%
    of the kill phase; with the rest of each step (planner, commits) and the restarts after
    each kill, the work lasts about as long as the kill phase, so kills land in runs' work
    rather than on idle workers (at 40% the runs were done after 3/4 of the phase and half the
    kills hit a worker between tasks)."""
    busy_ms = cfg.seconds * 1000 * cfg.workers * 0.6
    return int(min(2000, max(50, busy_ms / (cfg.runs * 3))))


def process_env(cfg: Config, database_url: str, redis_url: str, queue: str, out: Path) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "agentconsole.settings",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "WARNING",
            "DEBUG": "0",
            # The driver talks plain HTTP to each web process, as a TLS proxy in front would:
            # production's default redirect to HTTPS (DEBUG=0) would answer it with a 301.
            "SECURE_SSL_REDIRECT": "0",
            "SECRET_KEY": env.get("SECRET_KEY") or "soak-" + uuid.uuid4().hex,
            # A private queue on the shared Redis: web processes enqueue to it, workers and the
            # sweeper consume and send to it; nobody else's worker sees these runs.
            "AGENTCONSOLE_QUEUE": queue,
            # Named after the runs' queue, so the soak's Redis cleanup finds it too.
            "AGENTCONSOLE_CONTROL_QUEUE": f"{queue}-sweep",
            "AGENTCONSOLE_TOOLS": "soak.tools",
            "AGENTCONSOLE_RUN_OUTPUT_ROOT": str(out),
            # Recovery waits for a dead worker's lease to lapse and the next sweep: short values
            # so a soak of a few minutes sees many recoveries (defaults: 15 s and 5 s).
            "AGENTCONSOLE_LEASE_TTL_S": str(cfg.lease_ttl_s),
            "SWEEP_INTERVAL_S": str(cfg.sweep_interval_s),
            # One operator starts every run: per-subject limits and the create throttle are not
            # what a soak measures (0 / "" switch them off).
            "AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT": "0",
            "AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT": "0",
            "AGENTCONSOLE_RUN_CREATE_RATE": "",
        }
    )
    return env


@dataclass
class Outcome:
    results: dict[str, Any]
    ok: bool


def soak(cfg: Config, database_url: str, redis_url: str, say: Callable[[str], None]) -> Outcome:
    tag = uuid.uuid4().hex[:8]
    queue = f"soak-{tag}"
    url, drop = private_database(database_url, prefix="soak")
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    out = workdir / "run-output"
    out.mkdir()
    env = process_env(cfg, url, redis_url, queue, out)
    shared = ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "SECRET_KEY", "DEBUG")
    os.environ.update({k: env[k] for k in shared})
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from bench.support.stack import _user, forget_queue

    rng = random.Random(cfg.seed)  # noqa: S311 — reproducible kill times, not secrets
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as exits:
            exits.callback(forget_queue, redis_url, queue)
            call_command("migrate", verbosity=0)
            _, token = _user(f"soak-operator-{tag}", "operator")
            say(f"starting {cfg.webs} web, {cfg.workers} worker processes and beat")
            stack = procs.start(
                exits, env, webs=cfg.webs, workers=cfg.workers, workdir=workdir, prefix=queue
            )
            api = Api(stack.web_ports, token)
            hold_ms = hold_for(cfg)
            say(f"creating {cfg.runs} runs through HTTP (tool calls ~{hold_ms} ms)")
            t_create = time.monotonic()
            try:
                runs = create_runs(api, cfg.runs, rng, hold_ms)
            except SoakError as exc:
                logs = "\n".join(w.tail(40) for w in stack.webs)
                raise SoakError(f"{exc}\nweb process logs:\n{logs}") from None
            create_s = time.monotonic() - t_create
            approver = Approver(api)
            thread = threading.Thread(target=approver.loop, name="approver", daemon=True)
            thread.start()
            exits.callback(thread.join, 10)
            exits.callback(approver.stop.set)

            progress = Progress(redis_url, queue, env["AGENTCONSOLE_CONTROL_QUEUE"])
            timeline = Timeline(redis_url, (queue, progress.control), listening=stack.listening)
            timeline.start(exits)
            kills = kill_phase(
                stack,
                rng,
                count=cfg.kills,
                seconds=cfg.seconds,
                min_up_s=cfg.min_up_s,
                say=say,
                status=progress,
                watch=timeline.watch_kill,
            )
            say(f"{len(kills)} kills done; draining (up to {cfg.drain_s:.0f} s)")
            drained_s = drain(cfg, stack, list(runs), say, progress)
            approver.stop.set()
            thread.join(10)
            timeline.finish()
            outcome = conclude(cfg, stack, runs, kills, approver, out, timeline)
            outcome.results.update(
                elapsed_s=round(time.monotonic() - started, 1),
                create_s=round(create_s, 1),
                drain_s=round(drained_s, 1),
                requests_per_web=list(api.requests.values()),
                hold_ms=hold_ms,
                **progress.deepest_seen(),
            )
            return outcome
    finally:
        connections.close_all()
        if cfg.keep_db:
            say(f"database kept for inspection: {url}")
        else:
            drop()
        shutil.rmtree(workdir, ignore_errors=True)


def conclude(
    cfg: Config,
    stack: procs.Stack,
    runs: dict[str, str | None],
    kills: list[Kill],
    approver: Approver,
    out: Path,
    timeline: Timeline,
) -> Outcome:
    """Every check and the figures; run while the workers still live (their pids are the live
    ones the lease check compares with)."""
    from soak import checks
    from soak.tools import read_effects

    effects = read_effects(out)
    results_checks, duplicates = checks.run_checks(runs, effects, stack.live_pids())
    times, lost_held = recoveries(kills)
    results_checks.append(checks._check("every run a killed worker held moved on", lost_held))
    web_errors = server_errors(stack)
    results_checks.append(
        checks._check("no server error (5xx) from the web", approver.server_errors() + web_errors)
    )
    spread = list(times.values())
    results = summarize(cfg, runs, kills, spread, duplicates, results_checks, approver)
    results.update(
        recovery_timelines=timeline.report(times),
        effects=len(effects),
        worker_restart_s=_spread([t for w in stack.workers for t in w.restart_s]),
    )
    ok = all(c.ok for c in results_checks)
    if not ok:
        results["logs"] = {w.name: w.proc.tail(20) for w in stack.workers}
        results["web_errors"] = web_errors
    return Outcome(results, ok)


def server_errors(stack: procs.Stack) -> list[str]:
    """What the web processes logged about a request they failed (Django's ``django.request``
    error with its traceback), one excerpt per failure; their logs go when the soak ends."""
    found = []
    for web in stack.webs:
        lines = web.text().splitlines()
        for i, line in enumerate(lines):
            if "Internal Server Error" in line:
                found.append("\n".join(lines[i : i + 40])[:4000])
    return found


def drain(
    cfg: Config,
    stack: procs.Stack,
    run_ids: list[str],
    say: Callable[[str], None],
    progress: Progress,
) -> float:
    """Wait until every run is terminal or waits for a person (bounded by ``drain_s``)."""
    from runs import models as m
    from soak.checks import TERMINAL_VALUES

    t0 = time.monotonic()
    procs.wait_ready(stack, timeout_s=60)
    next_report = t0 + 15
    while time.monotonic() - t0 < cfg.drain_s:
        unsettled = m.Run.objects.filter(pk__in=run_ids).exclude(status__in=TERMINAL_VALUES)
        if not unsettled.exists():
            break
        if time.monotonic() > next_report:
            say(f"  draining: {progress()}")
            next_report = time.monotonic() + 15
        time.sleep(POLL_S)
    return time.monotonic() - t0


@dataclass
class Progress:
    """One line of progress: runs by status and the depth of the soak's queue (the deepest
    seen is a result: a queue that keeps growing means the runs cannot keep up)."""

    redis_url: str
    queue: str
    control: str
    deepest: int = 0
    control_deepest: int = 0

    def __call__(self) -> str:
        import redis
        from django.db.models import Count

        from runs import models as m

        rows = m.Run.objects.values_list("status").annotate(n=Count("id")).values("status", "n")
        client = redis.Redis.from_url(self.redis_url)
        try:
            depth, control = int(client.llen(self.queue)), int(client.llen(self.control))
        finally:
            client.close()
        self.deepest = max(self.deepest, depth)
        self.control_deepest = max(self.control_deepest, control)
        runs = ", ".join(f"{r['status']}={r['n']}" for r in sorted(rows, key=str))
        return f"{runs}; queue {depth}, control queue {control}"

    def deepest_seen(self) -> dict[str, int]:
        return {"queue_deepest": self.deepest, "control_queue_deepest": self.control_deepest}


def summarize(
    cfg: Config,
    runs: dict[str, str | None],
    kills: list[Kill],
    times: list[float],
    duplicates: int,
    results_checks: list[Any],
    approver: Approver,
) -> dict[str, Any]:
    from django.db.models import Count

    from runs import models as m
    from soak.checks import TERMINAL_VALUES, WAITING_VALUES

    statuses = dict(
        m.Run.objects.filter(pk__in=list(runs))
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    lost = sum(n for s, n in statuses.items() if s not in TERMINAL_VALUES | WAITING_VALUES)
    handoffs = m.Handoff.objects.filter(run_id__in=list(runs)).count()
    # Why a run did not complete (a run whose tool's effect nobody could know hands off).
    stopped = dict(
        m.Run.objects.filter(pk__in=list(runs))
        .exclude(status="completed")
        .values_list("stop_reason")
        .annotate(n=Count("id"))
        .values_list("stop_reason", "n")
    )
    return {
        "passed": all(c.ok for c in results_checks),
        "runs": len(runs),
        "kills": len(kills),
        "kills_planned": cfg.kills,
        # Kills whose worker held a run at that moment (the rest hit an idle or waiting one).
        "kills_holding_runs": sum(1 for k in kills if k.held),
        "recoveries": len(times),
        "duplicates": duplicates,
        "lost": lost,
        "recovery_s": _spread(times),
        "statuses": statuses,
        "stop_reasons": stopped,
        "approvals": approver.approved,
        "approvals_refused": approver.refused,
        "approver_errors": approver.errors[:5],
        "handoffs": handoffs,
        "checks": [c.as_dict() for c in results_checks],
        "config": {
            "web_processes": cfg.webs,
            "worker_processes": cfg.workers,
            "seconds": cfg.seconds,
            "min_up_s": cfg.min_up_s,
            "seed": cfg.seed,
            "lease_ttl_s": cfg.lease_ttl_s,
            "sweep_interval_s": cfg.sweep_interval_s,
            "cpus": os.cpu_count(),
        },
    }


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": round(percentile(values, 50), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2),
    }


def print_table(results: dict[str, Any]) -> None:
    rec = results["recovery_s"]
    print(
        f"\nsoak: {results['runs']} runs, {results['kills']} kills, "
        f"{results['recoveries']} recoveries (p50 {rec['p50']} s, p99 {rec['p99']} s), "
        f"duplicates {results['duplicates']}, lost {results['lost']}, "
        f"{results['approvals']} approvals, {results['handoffs']} handoffs, "
        f"{results['elapsed_s']} s"
    )
    print("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(results["statuses"].items())))
    for c in results["checks"]:
        mark = "ok  " if c["ok"] else "FAIL"
        print(f"  {mark} {c['name']:<44} {c['offenders']:>4} {c['detail']}")
        for line in c["evidence"]:
            print(f"         {line}")


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM or SIGINT: stop once, through the cleanup (processes, database, Redis keys);
    further signals are ignored so a second one cannot cut the cleanup short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> int:
    cfg = Config.from_env(dict(os.environ))
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)

    def say(msg: str) -> None:
        print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    try:
        database_url, redis_url = servers(dict(os.environ))
        say(f"seed {cfg.seed}: {cfg.runs} runs, {cfg.kills} kills over ~{cfg.seconds:.0f} s")
        outcome = soak(cfg, database_url, redis_url, say)
    except (SoakError, RuntimeError) as exc:
        print(f"soak: cannot run: {exc}", file=sys.stderr)
        return 2
    cfg.results.parent.mkdir(parents=True, exist_ok=True)
    cfg.results.write_text(json.dumps(outcome.results, indent=2, default=str))
    print_table(outcome.results)
    print(f"\nwritten: {cfg.results}")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
