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
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import ROOT, percentile, private_database
from soak import stack as procs

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
HTTP_TIMEOUT_S = 30
POLL_S = 0.5


@dataclass(frozen=True)
class Config:
    runs: int
    kills: int
    seconds: float  # the kill phase
    drain_s: float  # after the last kill: how long runs may take to settle
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
            webs=int(env.get("SOAK_WEB", "2")),
            workers=int(env.get("SOAK_WORKERS", "3")),
            seed=int(env.get("SOAK_SEED") or random.SystemRandom().randrange(1 << 30)),
            lease_ttl_s=float(env.get("SOAK_LEASE_TTL_S", "3")),
            sweep_interval_s=float(env.get("SOAK_SWEEP_INTERVAL_S", "1")),
            results=Path(env.get("SOAK_RESULTS") or ROOT / "soak" / "results.json"),
            keep_db=env.get("SOAK_KEEP_DB", "") == "1",
        )


class SoakError(Exception):
    """The soak could not run (no PostgreSQL, a process that does not start, …)."""


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


# --- HTTP --------------------------------------------------------------------------------------


class Api:
    """The soak's HTTP client: an operator token, requests spread over the web processes."""

    def __init__(self, ports: list[int], token: str) -> None:
        self.ports = ports
        self.token = token
        self._next = 0
        self._lock = threading.Lock()
        self.requests: dict[int, int] = dict.fromkeys(ports, 0)

    def _port(self) -> int:
        with self._lock:
            port = self.ports[self._next % len(self.ports)]
            self._next += 1
            self.requests[port] += 1
        return port

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self._port()}{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url,
            data=data,
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


# --- runs --------------------------------------------------------------------------------------


def run_body(i: int, kind: str, rng: random.Random, hold_ms: int) -> dict[str, Any]:
    """One run's definition (fixture planner): reads and, for ``approve`` and ``blind`` runs, a
    write to the external log between them; then a final answer citing the first read."""

    def hold() -> int:
        return rng.randint(hold_ms // 2, hold_ms * 3 // 2)

    def read(n: int) -> dict[str, Any]:
        entry = f"r{i}-read{n}"
        return {"tool_name": "soak_read", "arguments": {"entry": entry, "hold_ms": hold()}}

    def write(tool: str) -> dict[str, Any]:
        # The hold split around the effect: a kill may land before it, or after it while the
        # answer is still on its way (the effect happened, the ledger does not know yet).
        total = hold()
        before = rng.randint(0, total)
        arguments = {"entry": f"r{i}-{tool}", "before_ms": before, "after_ms": total - before}
        return {"tool_name": tool, "arguments": arguments}

    calls = {
        "approve": [read(1), write("soak_write"), read(2)],
        "blind": [read(1), write("soak_write_blind"), read(2)],
        "reads": [read(1), read(2), read(3)],
    }[kind]
    outputs: list[dict[str, Any]] = [
        {"kind": "tool", "proposal_id": f"p{n + 1}", "tool_version": "1",
         "reason_summary": "soak", "source_observation_ids": ["user-1"], **call}
        for n, call in enumerate(calls)
    ]  # fmt: skip
    outputs.append({"kind": "final", "answer": f"soak run {i} done",
                    "citation_observation_ids": ["tool-1"]})  # fmt: skip
    return {
        "goal": f"soak run {i} ({kind})",
        "budgets": {"max_steps": len(outputs) + 2, "max_tool_calls": len(calls) + 1,
                    "max_repeated_proposal": 2, "deadline_ms": 3_600_000},
        "grants": [{"capability": "soak:use", "resource_scope": "*", "expires_at_step": 50}],
        "planner": {"kind": "fixture", "outputs": outputs},
    }  # fmt: skip


KINDS = ("approve", "approve", "blind", "reads")


def planned_write(i: int, kind: str) -> str | None:
    """The ``entry`` of run ``i``'s write (``run_body``), None for a run that only reads."""
    tool = {"approve": "soak_write", "blind": "soak_write_blind"}.get(kind)
    return f"r{i}-{tool}" if tool else None


def create_runs(api: Api, cfg: Config, rng: random.Random, hold_ms: int) -> dict[str, str | None]:
    """Create ``cfg.runs`` runs through the API (8 at a time); {run_id: its planned write}."""
    bodies = [(i, run_body(i, KINDS[i % len(KINDS)], rng, hold_ms)) for i in range(cfg.runs)]

    def create(item: tuple[int, dict[str, Any]]) -> tuple[str, str | None]:
        i, body = item
        status, data = api.call("POST", "/api/runs/", body)
        if status != 201:
            raise SoakError(f"POST /api/runs/ answered {status}: {data}")
        return data["run_id"], planned_write(i, KINDS[i % len(KINDS)])

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(create, bodies))


@dataclass
class Approver:
    """Approves every pending confirmation through HTTP until stopped (a thread)."""

    api: Api
    approved: int = 0
    refused: dict[int, int] = field(default_factory=dict)  # status → count (a race: 409)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.once()
            except (OSError, ValueError) as exc:  # a web process busy or restarting: retry
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            self.stop.wait(POLL_S)

    def once(self) -> int:
        status, pending = self.api.call("GET", "/api/confirmations/?status=pending")
        if status != 200:
            self.errors.append(f"GET /api/confirmations/: {status}")
            return 0
        done = 0
        for c in pending:
            path = f"/api/confirmations/{c['confirmation_id']}/approve/"
            body = {"proposal_hash": c["proposal_hash"], "reason": "soak: approved"}
            status, _ = self.api.call("POST", path, body)
            if status == 200:
                self.approved += 1
                done += 1
            else:
                self.refused[status] = self.refused.get(status, 0) + 1
        return done


# --- kills -------------------------------------------------------------------------------------


@dataclass
class Kill:
    at: float  # wall clock (time.time()), comparable with the database's timestamps
    worker: str
    generation: int
    # run id → the run's last trace sequence once the worker was dead
    held: dict[str, int] = field(default_factory=dict)


def held_runs(pids: set[int]) -> list[str]:
    """Active runs whose lease names one of ``pids`` (``host:pid:nonce``)."""
    from runs import models as m

    rows = m.Run.objects.filter(
        lease_owner__isnull=False, status__in=["created", "running", "cancelling"]
    ).values_list("id", "lease_owner")
    return [run_id for run_id, owner in rows if _owner_pid(owner) in pids]


def _owner_pid(owner: str) -> int | None:
    parts = owner.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def last_sequences(run_ids: list[str]) -> dict[str, int]:
    from django.db.models import Max

    from runs import models as m

    rows = (
        m.TraceEvent.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(hi=Max("sequence"))
        .values_list("run_id", "hi")
    )
    return dict(rows)


def kill_one(stack: procs.Stack, rng: random.Random) -> Kill | None:
    """SIGKILL one random listening worker (its process group) and restart it; None when no
    worker listens (all are restarting)."""
    ready = [w for w in stack.workers if w.ready()]
    if not ready:
        return None
    victim = rng.choice(ready)
    pids = victim.pids()
    held_before = held_runs(pids)
    kill = Kill(at=time.time(), worker=victim.name, generation=victim.generation)
    procs.kill(victim)
    # Sequences read once the worker is dead: nothing it committed can count as a recovery.
    # A run it held that is already settled (it committed the last step, then died before
    # releasing the lease) needs no recovery.
    kill.held = {r: s for r, s in last_sequences(held_before).items() if _active(r)}
    procs.restart(stack, victim)
    return kill


def _active(run_id: str) -> bool:
    from runs import models as m

    return m.Run.objects.filter(pk=run_id, status__in=["created", "running", "cancelling"]).exists()


def recoveries(kills: list[Kill]) -> tuple[list[float], list[str]]:
    """For each run a killed worker held: seconds from the kill to the run's next committed
    trace event (another worker took it over and moved it on). Runs that never moved: lost."""
    from runs import models as m

    times, lost = [], []
    for kill in kills:
        for run_id, seq in kill.held.items():
            nxt = (
                m.TraceEvent.objects.filter(run_id=run_id, sequence__gt=seq)
                .order_by("sequence")
                .values_list("created_at", flat=True)
                .first()
            )
            if nxt is None:
                lost.append(f"{run_id} (held by {kill.worker} killed at {kill.at:.1f})")
            else:
                times.append(max(0.0, nxt.timestamp() - kill.at))
    return times, lost


# --- the soak ----------------------------------------------------------------------------------


def hold_for(cfg: Config) -> int:
    """A tool call's average duration (ms), so that the runs keep the workers busy for about
    the kill phase: 3 tool calls per run, spread over the workers."""
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
            "SECRET_KEY": env.get("SECRET_KEY") or "soak-" + uuid.uuid4().hex,
            # A private queue on the shared Redis: web processes enqueue to it, workers and the
            # sweeper consume and send to it; nobody else's worker sees these runs.
            "AGENTCONSOLE_QUEUE": queue,
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
    url, drop = private_database(database_url)
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

    from bench.stack import _user, forget_queue
    from soak import checks
    from soak.tools import read_effects

    rng = random.Random(cfg.seed)  # noqa: S311 — reproducible kill times, not secrets
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as exits:
            exits.callback(forget_queue, redis_url, queue)
            call_command("migrate", verbosity=0)
            _, token = _user(f"soak-operator-{tag}", "operator")
            say(f"starting {cfg.webs} web, {cfg.workers} worker processes and beat")
            stack = procs.start(exits, env, webs=cfg.webs, workers=cfg.workers, workdir=workdir)
            api = Api(stack.web_ports, token)
            hold_ms = hold_for(cfg)
            say(f"creating {cfg.runs} runs through HTTP (tool calls ~{hold_ms} ms)")
            t_create = time.monotonic()
            runs = create_runs(api, cfg, rng, hold_ms)
            create_s = time.monotonic() - t_create
            approver = Approver(api)
            thread = threading.Thread(target=approver.loop, name="approver", daemon=True)
            thread.start()
            exits.callback(thread.join, 10)
            exits.callback(approver.stop.set)

            kills = kill_phase(cfg, stack, rng, say)
            say(f"{len(kills)} kills done; draining (up to {cfg.drain_s:.0f} s)")
            drained_s = drain(cfg, stack, list(runs), say)
            approver.stop.set()
            thread.join(10)
            # Checked while the workers still live: their pids are the live ones.
            live = stack.live_pids()
            effects = read_effects(out)
            results_checks, duplicates = checks.run_checks(runs, effects, live)
            times, lost_held = recoveries(kills)
            lost_check = checks._check("every run a killed worker held moved on", lost_held)
            results_checks.append(lost_check)
            results = summarize(cfg, runs, kills, times, duplicates, results_checks, approver)
            results.update(
                elapsed_s=round(time.monotonic() - started, 1),
                create_s=round(create_s, 1),
                drain_s=round(drained_s, 1),
                requests_per_web=list(api.requests.values()),
                hold_ms=hold_ms,
                effects=len(effects),
            )
            if not all(c.ok for c in results_checks):
                results["logs"] = {w.name: w.proc.tail(20) for w in stack.workers}
            return Outcome(results, all(c.ok for c in results_checks))
    finally:
        connections.close_all()
        if cfg.keep_db:
            say(f"database kept for inspection: {url}")
        else:
            drop()
        shutil.rmtree(workdir, ignore_errors=True)


def kill_phase(
    cfg: Config, stack: procs.Stack, rng: random.Random, say: Callable[[str], None]
) -> list[Kill]:
    """``cfg.kills`` kills at random intervals (uniform, mean ``seconds / kills``)."""
    kills: list[Kill] = []
    mean = cfg.seconds / max(1, cfg.kills)
    # Bounded: at worst twice the planned phase (kills wait while every worker restarts).
    deadline = time.monotonic() + 2 * cfg.seconds + 60
    next_report = time.monotonic() + 15
    while len(kills) < cfg.kills and time.monotonic() < deadline:
        time.sleep(rng.uniform(0, 2 * mean))
        kill = kill_one(stack, rng)
        if kill is not None:
            kills.append(kill)
        else:
            time.sleep(0.2)
        if time.monotonic() > next_report:
            say(f"  {len(kills)}/{cfg.kills} kills, {_status_line()}")
            next_report = time.monotonic() + 15
    return kills


def drain(cfg: Config, stack: procs.Stack, run_ids: list[str], say: Callable[[str], None]) -> float:
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
            say(f"  draining: {_status_line()}")
            next_report = time.monotonic() + 15
        time.sleep(POLL_S)
    return time.monotonic() - t0


def _status_line() -> str:
    from django.db.models import Count

    from runs import models as m

    rows = m.Run.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    return ", ".join(f"{s}={n}" for s, n in sorted(rows))


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
    return {
        "passed": all(c.ok for c in results_checks),
        "runs": len(runs),
        "kills": len(kills),
        "kills_planned": cfg.kills,
        "recoveries": len(times),
        "duplicates": duplicates,
        "lost": lost,
        "recovery_s": {
            "p50": round(percentile(times, 50), 2) if times else None,
            "p99": round(percentile(times, 99), 2) if times else None,
            "max": round(max(times), 2) if times else None,
        },
        "statuses": statuses,
        "approvals": approver.approved,
        "approvals_refused": approver.refused,
        "approver_errors": approver.errors[:5],
        "handoffs": handoffs,
        "checks": [c.as_dict() for c in results_checks],
        "config": {
            "web_processes": cfg.webs,
            "worker_processes": cfg.workers,
            "seconds": cfg.seconds,
            "seed": cfg.seed,
            "lease_ttl_s": cfg.lease_ttl_s,
            "sweep_interval_s": cfg.sweep_interval_s,
            "cpus": os.cpu_count(),
        },
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


def main() -> int:
    cfg = Config.from_env(dict(os.environ))

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
