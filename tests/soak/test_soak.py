"""`make soak`, short (issue 14 item 6): the soak driver end to end on PostgreSQL + Redis, and
its checker on evidence made to fail.

The end-to-end test runs ``python -m soak`` as a subprocess with small sizes (20 runs, 8 SIGKILLs
of worker process groups): 2 web processes, 3 workers and a beat of its own, on a private
database and queue. It skips, saying why, without PostgreSQL or Redis. Every process the soak
starts carries a tag in its environment; whatever still carries it afterwards is killed, also
when the soak fails or times out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from soak import checks
from soak.run import SoakError, servers
from tests.support.procs import TAG_ENV, kill_all, tagged

ROOT = Path(__file__).resolve().parents[2]
SOAK_TIMEOUT_S = 420  # a generous bound on a busy 2-core machine, never a claim about speed


def _effect(token: str, entry: str, tool: str = "soak_write") -> dict[str, Any]:
    return {"token": token, "run_id": "run_x", "entry": entry, "tool": tool, "pid": 1}


def test_effects_once_counts_a_second_effect_under_either_name() -> None:
    clean, dup = checks.effects_once([_effect("t1", "r1"), _effect("t2", "r2")])
    assert clean.ok
    assert dup == 0
    same_token, dup = checks.effects_once([_effect("t1", "r1"), _effect("t1", "r1")])
    assert not same_token.ok
    assert dup == 2
    new_token, dup = checks.effects_once([_effect("t1", "r1"), _effect("t9", "r1")])
    assert not new_token.ok
    assert dup == 1
    # A read may run again after a crash (same token): not an effect.
    reads, dup = checks.effects_once([_effect("t1", "r1", "soak_read")] * 2)
    assert reads.ok
    assert dup == 0


@pytest.mark.django_db
def test_leases_live_names_a_lease_held_by_a_dead_process() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from runs import models as m
    from runs import services
    from runs.domain.budgets import RunBudgets

    state = services.run_create(
        subject="soak-check",
        goal="lease check",
        budgets=RunBudgets(max_steps=2),
        grants=[],
        planner={"kind": "fixture", "outputs": []},
    )
    later = timezone.now() + timedelta(seconds=60)
    m.Run.objects.filter(pk=state.run_id).update(
        lease_owner="host:4242:abcd1234", lease_expires_at=later
    )
    assert checks.leases_live([state.run_id], live_pids={4242}).ok
    dead = checks.leases_live([state.run_id], live_pids={1})
    assert not dead.ok
    assert "4242" in dead.evidence[0]
    # A trace whose events are 1..n is complete; the run has not stopped, so no run.stopped needed.
    assert checks.traces_complete([state.run_id]).ok


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.slow
def test_short_soak_passes(tmp_path: Path) -> None:
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not database_url.startswith(("postgres://", "postgresql://")) or not redis_url:
        pytest.skip(
            "the soak needs PostgreSQL and Redis: set DATABASE_URL=postgres://… and REDIS_URL "
            f"(this run: DATABASE_URL={database_url or 'unset'}, REDIS_URL={redis_url or 'unset'})"
        )
    try:
        servers(dict(os.environ))
    except SoakError as exc:
        pytest.skip(f"the soak needs PostgreSQL and Redis: {exc}")
    tag = f"soak-test-{uuid.uuid4().hex[:8]}"
    results = tmp_path / "results.json"
    env = {
        **os.environ,
        TAG_ENV: tag,
        "SOAK_RUNS": "20",
        "SOAK_KILLS": "8",
        # 8 kills over ~15 s (the kill phase waits for a worker that has been up 2 s, so a busy
        # machine stretches it rather than skipping kills); the checks are the same.
        "SOAK_SECONDS": "15",
        "SOAK_DRAIN_S": "90",
        "SOAK_RESULTS": str(results),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "soak"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=SOAK_TIMEOUT_S,
            check=False,
        )
    finally:
        leftovers = kill_all(tagged(tag))
    output = f"{done.stdout}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, output
    assert not leftovers, f"processes left behind: {leftovers}"
    figures = json.loads(results.read_text())
    assert figures["passed"], output
    assert figures["runs"] == 20
    assert figures["kills"] == 8
    assert figures["duplicates"] == 0
    assert figures["lost"] == 0
    failed = [c["name"] for c in figures["checks"] if not c["ok"]]
    assert not failed, output
    # Both web processes served requests; a confirmation was approved through HTTP.
    assert all(n > 0 for n in figures["requests_per_web"]), figures["requests_per_web"]
    assert figures["approvals"] > 0
