"""The fault lab (issue 3, seed §16): each experiment on the real stack — database + a real
Celery worker process this module starts — with the evidence that decides pass or fail.

Experiments are scenario files (``runs/fixtures/faultlab`` and the demo scenarios); the checks
below read only what the system recorded: run state, ledger, handoffs, trace, artifacts,
preferences.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection
from django.utils import timezone
from kombu import Queue

from agentconsole.celery import app
from memory import selectors as memory_selectors
from runs import models as m
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import TERMINAL, Status, StopReason
from runs.engine.sweeper import sweep
from runs.fault_lab import faultlab_calls
from runs.fault_lab.faults import CRASH_ENV
from runs.start.scenarios import Scenario, create_run, parse_scenario
from runs.tools.corpus import demo_corpus_dir, document_load

QUEUE = "faultlab"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WAIT_S = 60
SWEEP_EVERY_S = 3.0


@dataclass(frozen=True)
class Experiment:
    name: str
    scenario: str  # path below runs/fixtures
    check: Callable[[m.Run], list[str]]  # returns the failed expectations (empty: passed)


def _codes(run: m.Run) -> list[str]:
    out = []
    for details in m.TraceEvent.objects.filter(run=run).values_list("details", flat=True):
        code = details.get("code") or details.get("reason")
        if code and code not in out:
            out.append(code)
    return out


def _expect(failures: list[str], ok: bool, what: str) -> None:
    if not ok:
        failures.append(what)


def _check_injection(run: m.Run) -> list[str]:
    f: list[str] = []
    _expect(f, run.status == "completed", f"completed (got {run.status})")
    _expect(f, not memory_selectors.preference_records_exist(subject=run.subject), "no preference")
    _expect(f, "MEMORY_KEY_NOT_ALLOWED" in _codes(run), "rejection MEMORY_KEY_NOT_ALLOWED")
    _expect(f, not run.ledger.filter(tool_name="save_preference").exists(), "save never ran")
    return f


def _check_loop(run: m.Run) -> list[str]:
    f: list[str] = []
    _expect(
        f,
        run.stop_reason == StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION,
        "loop stop reason",
    )
    _expect(f, run.tool_calls <= run.max_repeated_proposal, "tool calls within the repeat limit")
    _expect(f, run.step == run.max_repeated_proposal + 1, "stopped at max_repeated_proposal + 1")
    handoff = run.handoffs.first()
    _expect(f, handoff is not None, "handoff opened")
    if handoff is not None:
        _expect(f, bool(handoff.bundle.get("last_trusted_observations")), "bundle has evidence")
    return f


def _check_verification(run: m.Run) -> list[str]:
    f: list[str] = []
    _expect(f, run.status == "failed", f"failed (got {run.status})")
    _expect(f, run.stop_reason == StopReason.TOOL_POSTCONDITION_FAILED, "TOOL_POSTCONDITION_FAILED")
    _expect(f, run.answer is None, "the final claiming success was not accepted")
    statuses = list(run.ledger.values_list("status", flat=True))
    _expect(
        f,
        statuses == [LedgerStatus.COMPENSATION_REQUIRED],
        f"ledger compensation-required {statuses}",
    )
    _expect(f, run.handoffs.filter(reason=StopReason.TOOL_POSTCONDITION_FAILED).exists(), "handoff")
    return f


def _check_cancel_no_effect(run: m.Run) -> list[str]:
    f: list[str] = []
    _expect(f, run.status == "cancelled", f"cancelled (got {run.status})")
    _expect(f, run.ledger.count() == 1, "no tool started after the cancel")
    _expect(f, not run.artifacts.exists(), "nothing written")
    _expect(f, "run.cancel-requested" in _events(run), "cancel request in the trace")
    return f


def _check_cancel_unknown(run: m.Run) -> list[str]:
    f: list[str] = []
    _expect(f, run.status == "failed", f"failed, not cancelled (got {run.status})")
    _expect(f, run.stop_reason == StopReason.TOOL_OUTCOME_UNKNOWN, "TOOL_OUTCOME_UNKNOWN")
    _expect(f, run.ledger.count() == 1, "no tool started after the cancel")
    _expect(
        f, run.handoffs.filter(reason=StopReason.TOOL_OUTCOME_UNKNOWN).exists(), "handoff opened"
    )
    return f


def _check_exactly_once(run: m.Run) -> list[str]:
    f: list[str] = []
    _expect(f, run.status == "completed", f"completed (got {run.status}, {run.stop_reason})")
    _expect(f, run.artifacts.count() == 1, f"one artifact (got {run.artifacts.count()})")
    tokens = list(run.ledger.values_list("idempotency_token", flat=True))
    _expect(f, len(tokens) == 1, f"one ledger row, one token (got {len(tokens)})")
    _expect(f, "planner.output" in _events(run), "planned")
    first_steps = m.TraceEvent.objects.filter(run=run, event="planner.output").count()
    _expect(f, first_steps == 2, f"never re-planned: two planner outputs (got {first_steps})")
    return f


def _check_crash(run: m.Run) -> list[str]:
    f = _check_exactly_once(run)
    _expect(f, "tool.recovered" in _events(run), "recovered by the next worker")
    return f


def _check_reconciled(run: m.Run) -> list[str]:
    f = _check_exactly_once(run)
    statuses = list(run.ledger.values_list("status", flat=True))
    _expect(f, statuses == [LedgerStatus.RECONCILED], f"ledger reconciled (got {statuses})")
    return f


def _events(run: m.Run) -> list[str]:
    return list(m.TraceEvent.objects.filter(run=run).values_list("event", flat=True))


EXPERIMENTS = (
    Experiment(
        "retrieval-injection-writes-memory", "scenarios/seed-walkthrough.json", _check_injection
    ),
    Experiment("repeated-proposal-loop", "scenarios/loop-stopped.json", _check_loop),
    Experiment(
        "write-succeeded-verification-failed",
        "faultlab/verification-failed.json",
        _check_verification,
    ),
    Experiment(
        "cancel-during-tool-no-effect", "faultlab/cancel-no-effect.json", _check_cancel_no_effect
    ),
    Experiment(
        "cancel-during-tool-unknown-effect",
        "faultlab/cancel-unknown-effect.json",
        _check_cancel_unknown,
    ),
    Experiment("crash-before-tool", "faultlab/crash-before_tool.json", _check_crash),
    Experiment("crash-during-tool", "faultlab/crash-during_tool.json", _check_crash),
    Experiment("crash-after-effect", "faultlab/crash-after_effect.json", _check_crash),
    Experiment("unknown-outcome-reconciled", "faultlab/unknown-reconciled.json", _check_reconciled),
)


def database_url() -> str:
    """The URL of the database this process is connected to (in tests: the test database),
    so the worker this module starts writes where this process reads."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = quote(s.get("USER") or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    host = s.get("HOST") or "localhost"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}@{host}{port}/{s['NAME']}"


@contextmanager
def worker_process(*, queue: str = QUEUE, extra_env: dict[str, str] | None = None):
    """A real Celery worker on its own queue, allowed to crash itself; stopped at the end."""
    env = dict(os.environ)
    env.update(
        {
            CRASH_ENV: "1",
            "AGENTCONSOLE_FAULTS_ENABLED": "1",  # the fault lab's own worker injects faults
            "DATABASE_URL": database_url(),
            "AGENTCONSOLE_LEASE_TTL_S": "2",
            "PYTHONPATH": str(settings.BASE_DIR),
            **(extra_env or {}),
        }
    )
    fd, log_name = tempfile.mkstemp(prefix="faultlab-worker-", suffix=".log")
    log = Path(log_name)
    celery = Path(sys.executable).with_name("celery")
    proc = subprocess.Popen(  # noqa: S603 — fixed argv: our venv's celery, our app
        [
            str(celery),
            "-A",
            "agentconsole",
            "worker",
            "-Q",
            queue,
            "--pool",
            "prefork",
            "--concurrency",
            "1",
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"faultlab-{uuid.uuid4().hex[:6]}@%h",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=fd,
        stderr=subprocess.STDOUT,
    )
    os.close(fd)
    try:
        deadline = time.monotonic() + 60
        while b"ready." not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fault-lab worker did not start; see {log}")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if os.environ.get("FAULTLAB_KEEP_LOG"):
            print(f"worker log kept: {log}", file=sys.stderr)
        else:
            log.unlink(missing_ok=True)


def _scenario(path: str) -> Scenario:
    scenario = parse_scenario((FIXTURES / path).read_bytes())
    # A fresh subject per experiment: evidence never mixes with earlier runs or the demo.
    return scenario.model_copy(update={"subject": f"faultlab-{uuid.uuid4().hex[:8]}"})


def run_experiment(experiment: Experiment, *, queue: str = QUEUE) -> dict[str, Any]:
    scenario = _scenario(experiment.scenario)
    state = create_run(scenario, enqueue=True, queue=queue)
    run = _wait(state.run_id, queue)
    failures = experiment.check(run) if run is not None else ["run did not settle in time"]
    run = m.Run.objects.get(pk=state.run_id)
    handoff = run.handoffs.first()
    return {
        "name": experiment.name,
        "passed": not failures,
        "evidence": {
            "run_id": run.pk,
            "status": run.status,
            "stop_reason": run.stop_reason,
            "steps": run.step,
            "tool_calls": run.tool_calls,
            "ledger": list(run.ledger.values("tool_name", "status", "attempt")),
            "artifacts": run.artifacts.count(),
            "handoff_id": handoff.pk if handoff else None,
            "handoff_reason": handoff.reason if handoff else None,
            "trace_codes": _codes(run),
            "failed_expectations": failures,
        },
    }


def _wait(run_id: str, queue: str) -> m.Run | None:
    """Poll until the run rests. When a worker died holding it (a started ledger row, its lease
    lapsed) run the sweeper — at most every ``SWEEP_EVERY_S``, as the periodic task would."""
    deadline = time.monotonic() + WAIT_S
    last_sweep = 0.0
    while time.monotonic() < deadline:
        run = m.Run.objects.get(pk=run_id)
        if run.status in {s.value for s in TERMINAL} | {Status.WAITING_CONFIRMATION.value}:
            return run
        lease_lapsed = run.lease_expires_at is None or run.lease_expires_at < timezone.now()
        orphan = run.ledger.filter(status=LedgerStatus.STARTED).exists()
        if lease_lapsed and orphan and time.monotonic() - last_sweep > SWEEP_EVERY_S:
            last_sweep = time.monotonic()
            sweep(queue=queue)
        time.sleep(0.1)
    return None


def _purge(queue: str) -> None:
    """Messages left by an earlier, interrupted lab run would only delay this one."""
    with app.connection_for_write() as conn:
        try:
            Queue(queue, channel=conn.default_channel).purge()
        except Exception:
            return


def run_all(*, names: list[str] | None = None) -> dict[str, Any]:
    if not m.Document.objects.filter(corpus="public").exists():
        for path in sorted(demo_corpus_dir().iterdir()):
            document_load(path=path, corpus="public")
    chosen = [e for e in EXPERIMENTS if not names or e.name in names]
    _purge(QUEUE)
    results = []
    if chosen:
        with worker_process():
            results = [run_experiment(e) for e in chosen]
    # The crashes at the model call (issue 22) start and kill their own workers and gateways.
    for name, experiment in faultlab_calls.EXPERIMENTS.items():
        if not names or name in names:
            _purge(QUEUE)
            results.append(experiment(worker_process, QUEUE, database_url()))
    passed = sum(1 for r in results if r["passed"])
    return {"experiments": results, "passed": passed, "failed": len(results) - passed}
