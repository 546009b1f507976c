"""The trace's hash chain on the database (issue 23 item 5): ``manage.py verify_trace`` finds an
event edited, deleted or reordered by someone with database access (who first switches off the
append-only trigger of migrations 0007/0014, as an attacker could), names the first broken
link and exits non-zero; writers racing on one run leave one valid chain; a run from before
migration 0014 reads as not chained.

The erase side (the chain still verifies after an erase) is in
tests/memory/test_erase_everywhere.py, on the scenario that erases a value everywhere.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from policy.domain.errors import DomainError
from policy.models import Confirmation as ConfirmationRow
from runs import models as m
from runs import services
from runs.domain.machine import TERMINAL, Status
from runs.domain.state import RunState
from runs.orm.store import OrmRunStore
from runs.trace.trace_checks import trace_verify
from tests.services.services_kit import MEMORY_GRANT, create_run, save_language, search
from tests.support.races import race

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = m.TraceEvent._meta.db_table
ROOT = Path(__file__).resolve().parents[2]


def _finished_run() -> str:
    """A run of two searches and a final answer: 20-odd events over several commits."""
    run_id = create_run([search("p1", "retry exhausted"), search("p2", "backoff")]).run_id
    state = services.run_advance(run_id=run_id)
    assert state is not None
    assert state.status in TERMINAL, state.status
    return run_id


def _tamper(*statements: tuple[str, list[Any]]) -> None:
    """Raw SQL past the application with the append-only trigger off (PostgreSQL: disabled
    in the transaction; SQLite, which cannot disable one: dropped and created again)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER runs_trace_append_only")
        else:
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = %s",
                ["runs_trace_append_only"],
            )
            [(kept,)] = cursor.fetchall()
            cursor.execute("DROP TRIGGER runs_trace_append_only")
        for sql, params in statements:
            cursor.execute(sql, params)
        if connection.vendor == "postgresql":
            # The foreign key's deferred checks first: ALTER TABLE refuses pending ones.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE {TABLE} ENABLE TRIGGER runs_trace_append_only")
        else:
            cursor.execute(kept)


def _verify(*args: str) -> tuple[str, str | None]:
    out = io.StringIO()
    try:
        call_command("verify_trace", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


def test_a_finished_run_verifies_and_its_head_is_the_last_link() -> None:
    run_id = _finished_run()
    run = m.Run.objects.get(pk=run_id)
    last = m.TraceEvent.objects.filter(run_id=run_id).order_by("-sequence").first()
    assert last is not None
    assert (last.sequence, last.chain_digest, last.hash_scheme) == (
        run.trace_seq,
        run.trace_head,
        "t1",
    )
    out, failed = _verify(run_id)
    assert failed is None
    assert f"{run_id}: trace verifies ({run.trace_seq} events) head {run.trace_head}" in out


def test_an_edited_event_is_named_and_the_command_fails() -> None:
    run_id, other = _finished_run(), _finished_run()
    _tamper(
        (
            f"UPDATE {TABLE} SET details = %s WHERE run_id = %s AND sequence = 4",  # noqa: S608
            ['{"forged": true}', run_id],
        )
    )
    out, failed = _verify("--all")
    assert f"BROKEN {run_id}: trace broken at event 4: edited (content changed)" in out
    assert f"{other}: trace verifies" in out
    assert failed is not None
    assert failed.startswith(f"1 run(s) failed; first: {run_id}: trace broken at event 4")


def test_a_deleted_event_is_named_missing() -> None:
    run_id = _finished_run()
    _tamper(
        (f"DELETE FROM {TABLE} WHERE run_id = %s AND sequence = 3", [run_id]),  # noqa: S608
    )
    verdict = trace_verify(run=m.Run.objects.get(pk=run_id))
    assert (verdict.status, verdict.sequence, verdict.what) == ("broken", 3, "missing")


def test_a_deleted_last_event_is_named_missing() -> None:
    run_id = _finished_run()
    last = m.Run.objects.get(pk=run_id).trace_seq
    _tamper(
        (f"DELETE FROM {TABLE} WHERE run_id = %s AND sequence = %s", [run_id, last]),  # noqa: S608
    )
    verdict = trace_verify(run=m.Run.objects.get(pk=run_id))
    assert (verdict.status, verdict.sequence, verdict.what) == ("broken", last, "missing")


def test_reordered_events_are_named_reordered() -> None:
    run_id = _finished_run()
    where = "WHERE run_id = %s AND sequence = %s"
    swap = f"UPDATE {TABLE} SET sequence = %s {where}"  # noqa: S608
    _tamper(
        (swap, [1000, run_id, 5]),
        (swap, [5, run_id, 6]),
        (swap, [6, run_id, 1000]),
    )
    verdict = trace_verify(run=m.Run.objects.get(pk=run_id))
    assert (verdict.status, verdict.sequence, verdict.what) == ("broken", 5, "reordered")


def test_the_command_exits_non_zero_from_a_shell() -> None:
    """The real ``manage.py verify_trace`` process on the test database: exit code 1 and the
    first broken link on stderr; an unknown run id is refused the same way."""
    run_id = _finished_run()
    _tamper(
        (
            f"UPDATE {TABLE} SET details = %s WHERE run_id = %s AND sequence = 2",  # noqa: S608
            ['{"forged": true}', run_id],
        )
    )
    done = _manage("verify_trace", run_id)
    assert done.returncode == 1, done
    assert f"first: {run_id}: trace broken at event 2: edited" in done.stderr
    assert _manage("verify_trace", "run_nope").returncode == 1
    assert _manage("verify_trace").returncode == 1  # neither runs nor --all


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    else:
        url = f"sqlite:///{db['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def waiting_runs() -> list[str]:
    """Runs waiting on a person's confirmation of a memory write."""
    runs = []
    for _ in range(3):
        run_id = create_run([save_language("p1", "en")], [MEMORY_GRANT]).run_id
        state = services.run_advance(run_id=run_id)
        assert state is not None
        assert state.status is Status.WAITING_CONFIRMATION
        runs.append(run_id)
    return runs


def test_racing_writers_leave_one_valid_chain(postgres_only: None, waiting_runs) -> None:
    """A person's decision, a cancel and a worker's step on one waiting run, released together
    on twenty connections, three runs over: whatever order the database serves them in, each
    run's events number 1..n without a gap and its chain verifies."""
    for run_id in waiting_runs:
        row = ConfirmationRow.objects.get(run_id=run_id, status="pending")

        def write(i: int, run_id: str = run_id, row: Any = row) -> Any:
            if i % 3 == 0:
                return services.confirmation_decide(
                    confirmation_id=row.pk, approved=True, shown_hash=row.proposal_hash,
                    by=f"reviewer{i}",
                )  # fmt: skip
            if i % 3 == 1:
                return services.run_advance(run_id=run_id)
            return services.run_cancel(run_id=run_id, by=f"operator{i}", reason="race")

        results = race(write)
        unexpected = [
            r for r in results if isinstance(r, BaseException) and not isinstance(r, DomainError)
        ]
        assert unexpected == [], unexpected
        services.run_advance(run_id=run_id)  # whatever is left to do (a cancel to finish)
        run = m.Run.objects.get(pk=run_id)
        sequences = list(
            m.TraceEvent.objects.filter(run_id=run_id)
            .order_by("sequence")
            .values_list("sequence", flat=True)
        )
        assert sequences == list(range(1, run.trace_seq + 1))
        verdict = trace_verify(run=run)
        assert verdict.status == "verified", verdict.text


def test_a_run_from_before_the_chain_reads_not_chained() -> None:
    """A run already there when migration 0014 ran has no head and its events no digests: it
    reads "not chained" (not broken), and stays unchained as it goes on; ``verify_trace``
    passes it unless told to require chains. Runs created after the migration are chained."""
    executor = MigrationExecutor(connection)
    # Read from the graph: the names stay right if a merge renumbers the migration.
    [target] = [k for k in executor.loader.graph.nodes if k[0] == "runs" and "trace_chain" in k[1]]
    before = [d for d in executor.loader.graph.nodes[target].dependencies if d[0] == "runs"]
    try:
        executor.migrate(before)
        apps = executor.loader.project_state(before).apps
        old = apps.get_model("runs", "Run").objects.create(
            id="run_old", subject="alice", goal="g", status="running", max_steps=5,
            max_tool_calls=1, max_repeated_proposal=1, deadline_ms=1, trace_seq=1, version=1,
        )  # fmt: skip
        apps.get_model("runs", "TraceEvent").objects.create(
            run=old, sequence=1, event="run.created", details={}
        )
        executor = MigrationExecutor(connection)
        executor.migrate([target])
    finally:
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())
    store = OrmRunStore()
    state = store.load("run_old")
    assert state.trace_head is None
    services.run_cancel(run_id="run_old", by="operator", reason="old")  # it goes on unchained
    digests = m.TraceEvent.objects.filter(run_id="run_old").values_list("content_digest")
    assert len(digests) > 1
    assert set(digests) == {(None,)}
    fresh = RunState(run_id="run_new", subject="alice", goal="g", max_steps=1, max_tool_calls=1,
                     max_repeated_proposal=1, deadline_ms=1)  # fmt: skip
    store.create(fresh, grants=[], confirmations=[], planner={})
    assert m.Run.objects.get(pk="run_new").trace_head == ""
    out, failed = _verify("run_old", "run_new")
    assert failed is None
    assert "run_old: trace not chained (a run from before the chain)" in out
    assert "run_new: trace verifies (0 events)" in out
    _, failed = _verify("run_old", "--require-chained")
    assert failed is not None
