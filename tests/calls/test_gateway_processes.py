"""The split at the model call on real processes (issue 22): Celery worker processes, gateway
processes (``manage.py gateway``, as scripts/gateway.sh starts it) and the slow model server,
killed with SIGKILL where the issue says:

- a gateway dies while the model thinks: the request is sent again once its lease lapses (two
  attempts recorded, the first lost), and the run completes;
- the worker dies and then the gateway dies after recording the reply: a new worker takes the
  recorded reply; the model is never asked twice for that step;
- runs beyond an endpoint's limit wait their turn: the model never sees more calls at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.slow_model import SlowModel
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.sweeper import sweep
from tests.calls import calls_kit as kit
from tests.support import workers as w

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

BASE_DIR = Path(__file__).resolve().parents[2]


class Gateways:
    """Gateway processes started with a cluster's environment (its database and queue)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> subprocess.Popen[str]:
        with (self.logs / f"gateway-{len(self.procs)}.log").open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "gateway", "--shutdown-s", "1"],
                cwd=BASE_DIR,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text()[-3000:]}" for p in sorted(self.logs.iterdir())
        )

    def kill(self, proc: subprocess.Popen[str]) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        w.stop(self.procs)


@pytest.fixture
def stack(
    tmp_path_factory: pytest.TempPathFactory, settings: Any, corpus: None
) -> Iterator[tuple[SlowModel, w.Cluster, Gateways]]:
    model = SlowModel(delay_s=1.0).start()
    endpoints = kit.endpoint_settings(model, max_in_flight=2)
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = endpoints
    extra = {
        "AGENTCONSOLE_MODEL_ENDPOINTS": json.dumps(endpoints),
        "AGENTCONSOLE_GATEWAY_LEASE_S": "2",
        "AGENTCONSOLE_GATEWAY_POLL_S": "0.1",
    }
    with w.cluster(tmp_path_factory, name="calls", concurrency=2, extra_env=extra) as c:
        # The gateway sends answered runs to the runs' queue: the cluster's private one.
        logs = tmp_path_factory.mktemp("gateway-logs")
        gateways = Gateways({**c.env, "AGENTCONSOLE_QUEUE": c.queue}, logs)
        try:
            yield model, c, gateways
        finally:
            gateways.stop()
            model.stop()


def _create(goal: str, subject: str = "alice") -> str:
    state = services.run_create(
        subject=subject,
        goal=goal,
        budgets=RunBudgets(max_steps=6, deadline_ms=300_000),
        grants=[kit.SEARCH_GRANT],
        planner={"kind": "openai", "endpoint": kit.ENDPOINT},
        enqueue=True,
    )
    return state.run_id


def _status(run_id: str) -> str:
    return m.Run.objects.get(pk=run_id).status


def _call_status(run_id: str, step: int) -> str | None:
    return (
        m.ModelCall.objects.filter(run_id=run_id, step=step)
        .values_list("status", flat=True)
        .first()
    )


def test_a_gateway_killed_while_the_model_thinks_resends_once_and_the_run_completes(
    stack: tuple[SlowModel, w.Cluster, Gateways],
) -> None:
    model, c, gateways = stack
    first = gateways.start()
    goal = "What happens after the retries are exhausted?"
    run_id = _create(goal)
    w.wait_for(lambda: model.in_flight == 1, timeout_s=60, what="the first call sent", log=c.log)

    gateways.kill(first)  # SIGKILL while the model thinks
    gateways.start()

    w.wait_for(
        lambda: _status(run_id) == "completed",
        timeout_s=90,
        what="run done",
        log=lambda: c.log() + gateways.log(),
    )
    call = m.ModelCall.objects.get(run_id=run_id, step=1)
    assert kit.attempts(call.id) == [(1, "lost"), (2, "answered")]
    assert model.requests[goal] == 3  # step 1 twice (one per lease), step 2 once


def test_a_recorded_reply_survives_the_worker_and_the_gateway_and_is_asked_once(
    stack: tuple[SlowModel, w.Cluster, Gateways],
) -> None:
    model, c, gateways = stack
    gateway = gateways.start()
    goal = "How are idempotency tokens derived?"
    run_id = _create(goal)
    w.wait_for(lambda: model.in_flight == 1, timeout_s=60, what="the first call sent", log=c.log)
    for worker in c.workers:  # every worker dies while the model thinks
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait(10)
    w.wait_for(lambda: _call_status(run_id, 1) == "answered", timeout_s=30, what="reply")
    gateways.kill(gateway)  # and the gateway, once the reply is recorded

    # A new worker and a new gateway: the run goes on from the recorded reply. The gateway may
    # have died before it sent the run on: the sweeper (beat, in a deployment) finds a reply
    # that no step took and sends the run itself.
    c.workers.append(w._start(_worker_command(c), c.env, c.queue))
    w._wait_ready(c)
    gateways.start()

    def done_or_swept() -> bool:
        if _status(run_id) == "completed":
            return True
        sweep()
        time.sleep(0.5)
        return False

    w.wait_for(done_or_swept, timeout_s=90, what="run done", log=lambda: c.log() + gateways.log())
    assert model.requests[goal] == 2  # one per step: the recorded reply was never asked again
    assert [a for a, _ in kit.attempts(f"{run_id}:s1")] == [1]


def test_runs_beyond_an_endpoints_limit_wait_their_turn_and_all_complete(
    stack: tuple[SlowModel, w.Cluster, Gateways],
) -> None:
    model, c, gateways = stack
    gateways.start()
    run_ids = [_create(f"question {i}", subject=f"user{i % 3}") for i in range(6)]

    w.wait_for(
        lambda: all(_status(r) == "completed" for r in run_ids),
        timeout_s=120,
        what="all runs done",
        log=lambda: c.log() + gateways.log(),
    )
    assert model.peak_in_flight == 2  # max_in_flight, over every call of every run
    assert model.total == 12


def _worker_command(c: w.Cluster) -> list[str]:
    celery = str(Path(sys.executable).with_name("celery"))
    return [
        celery, "-A", "agentconsole", "worker", "--pool", "prefork", "--concurrency", "1",
        "-l", "info", "-Q", c.queue, "-n", f"w-late-{c.queue}@%h",
        "--without-mingle", "--without-gossip",
    ]  # fmt: skip
