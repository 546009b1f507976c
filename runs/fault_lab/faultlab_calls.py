"""The fault lab's experiments at the model call (issue 22): real worker and gateway processes, the
slow model server (bench.support.slow_model, 1 s a completion), and SIGKILL where a crash hurts
most.

- ``gateway-crash-while-waiting``: the gateway dies while the model thinks. Evidence: the step's
  request sent twice (once per lease), two attempts recorded (the first lost), run completed.
- ``crash-after-reply-recorded``: every worker dies while the model thinks, then the gateway
  dies once the reply is recorded. A new worker and gateway (and the sweeper, for a message
  the gateway may not have sent) finish the run. Evidence: one request per step, one attempt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.engine.sweeper import sweep

ENDPOINT = "faultlab-model"
WAIT_S = 90
SEARCH = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 10}


@contextmanager
def model_server() -> Iterator[Any]:
    # import here: the slow model server lives with the benchmarks (a checkout's bench/, like
    # the lab's fixtures), so the engine never depends on it.
    from bench.support.slow_model import SlowModel

    server = SlowModel(delay_s=1.0).start()
    endpoints = {
        ENDPOINT: {"base_url": server.base_url, "model": "slow", "timeout_s": 10, "max_attempts": 3}
    }
    saved = settings.AGENTCONSOLE_MODEL_ENDPOINTS
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {**saved, **endpoints}
    try:
        yield server, {"AGENTCONSOLE_MODEL_ENDPOINTS": json.dumps(endpoints)}
    finally:
        settings.AGENTCONSOLE_MODEL_ENDPOINTS = saved
        server.stop()


@contextmanager
def gateways(env: dict[str, str]) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Start gateway processes on demand (``manage.py gateway``); all stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        with tempfile.NamedTemporaryFile(
            prefix="faultlab-gateway-", suffix=".log", delete=False
        ) as log:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "gateway", "--shutdown-s", "1"],
                cwd=settings.BASE_DIR,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            kill(proc)


def kill(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process and its group (a crash, not a shutdown)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait(10)


def create(goal: str, queue: str) -> str:
    state = services.run_create(
        subject=f"faultlab-{uuid.uuid4().hex[:8]}",
        goal=goal,
        budgets=RunBudgets(max_steps=4, deadline_ms=300_000),
        grants=[SEARCH],
        planner={"kind": "openai", "endpoint": ENDPOINT},
        enqueue=True,
        queue=queue,
    )
    return state.run_id


def wait_until(what: Callable[[], bool], *, sweeping: str | None = None) -> bool:
    """Poll ``what`` for up to WAIT_S; with ``sweeping``, sweep that queue every 2 s as the
    periodic task would."""
    deadline = time.monotonic() + WAIT_S
    last = 0.0
    while time.monotonic() < deadline:
        if what():
            return True
        if sweeping is not None and time.monotonic() - last > 2:
            last = time.monotonic()
            sweep(queue=sweeping, recovery_queue=sweeping)
        time.sleep(0.1)
    return False


def call_status(run_id: str, step: int) -> str | None:
    found = m.ModelCall.objects.filter(run_id=run_id, step=step).values_list("status", flat=True)
    return found.first()


def status(run_id: str) -> str:
    return str(m.Run.objects.values_list("status", flat=True).get(pk=run_id))


def attempts(run_id: str, step: int) -> list[list[Any]]:
    rows = m.CallAttempt.objects.filter(call__run_id=run_id, call__step=step).order_by("attempt")
    return [[a.attempt, a.outcome] for a in rows]


def report(name: str, run_id: str, failures: list[str], **evidence: Any) -> dict[str, Any]:
    run = m.Run.objects.get(pk=run_id)
    return {
        "name": name,
        "passed": not failures,
        "evidence": {
            "run_id": run_id,
            "status": run.status,
            "stop_reason": run.stop_reason,
            "steps": run.step,
            "tool_calls": run.tool_calls,
            "ledger": list(run.ledger.values("tool_name", "status", "attempt")),
            "artifacts": 0,
            "handoff_id": None,
            "handoff_reason": None,
            "trace_codes": [],
            "failed_expectations": failures,
            **evidence,
        },
    }


def expect(failures: list[str], ok: bool, what: str) -> None:
    if not ok:
        failures.append(what)


def gateway_crash_while_waiting(
    worker: Callable[..., Any], queue: str, database_url: str
) -> dict[str, Any]:
    with model_server() as (server, env), worker(extra_env={**env, "AGENTCONSOLE_QUEUE": queue}):
        genv = {**env, **_process_env(queue, database_url)}
        with gateways(genv) as start:
            first = start()
            goal = f"What happens after the retries are exhausted? ({uuid.uuid4().hex[:6]})"
            run_id = create(goal, queue)
            sent = wait_until(lambda: server.in_flight >= 1)  # the model thinks
            kill(first)
            start()
            done = wait_until(lambda: status(run_id) == "completed", sweeping=queue)
        failures: list[str] = []
        expect(failures, sent, "the first request was sent")
        expect(failures, done, "the run completed after the gateway's crash")
        expect(
            failures,
            attempts(run_id, 1) == [[1, "lost"], [2, "answered"]],
            "two attempts at step 1: the first lost with its gateway, the second answered",
        )
        expect(failures, server.requests[goal] == 3, "step 1 sent twice, step 2 once")
        return report(
            "gateway-crash-while-waiting",
            run_id,
            failures,
            model_requests=server.requests[goal],
            attempts_step_1=attempts(run_id, 1),
        )


def crash_after_reply_recorded(
    worker: Callable[..., Any], queue: str, database_url: str
) -> dict[str, Any]:
    with model_server() as (server, env):
        wenv = {**env, "AGENTCONSOLE_QUEUE": queue}
        with gateways({**env, **_process_env(queue, database_url)}) as start:
            goal = f"How are idempotency tokens derived? ({uuid.uuid4().hex[:6]})"
            with worker(extra_env=wenv) as proc:
                gateway = start()
                run_id = create(goal, queue)
                sent = wait_until(lambda: server.in_flight >= 1)
                kill(proc)  # every worker dies while the model thinks
            answered = wait_until(lambda: call_status(run_id, 1) == "answered")
            kill(gateway)  # and the gateway, once the reply is recorded
            with worker(extra_env=wenv):
                start()
                done = wait_until(lambda: status(run_id) == "completed", sweeping=queue)
        failures: list[str] = []
        expect(failures, sent and answered, "the reply was recorded while no worker ran")
        expect(failures, done, "the run completed from the recorded reply")
        expect(failures, server.requests[goal] == 2, "one request per step: never asked again")
        expect(failures, [a for a, _ in attempts(run_id, 1)] == [1], "one attempt for step 1")
        return report(
            "crash-after-reply-recorded",
            run_id,
            failures,
            model_requests=server.requests[goal],
            attempts_step_1=attempts(run_id, 1),
        )


def _process_env(queue: str, database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "AGENTCONSOLE_QUEUE": queue,
        "AGENTCONSOLE_GATEWAY_LEASE_S": "2",
        "AGENTCONSOLE_GATEWAY_POLL_S": "0.1",
        "PYTHONPATH": str(Path(settings.BASE_DIR)),
    }


# Each takes the lab's worker starter, its queue and the database URL its processes use.
EXPERIMENTS: dict[str, Callable[[Callable[..., Any], str, str], dict[str, Any]]] = {
    "gateway-crash-while-waiting": gateway_crash_while_waiting,
    "crash-after-reply-recorded": crash_after_reply_recorded,
}
