"""What a run's writes came to, on the ORM (issue 21 item 2): the demo's own case end to end, the
flag's SQL filter against its Python rule, the partial index that serves the filter, and the
runs from before migration 0012_run_outcome (never counted: NULL, not 0).

Personas: ``operator`` defines the demo profiles; ``alice`` (a user) starts runs from them and
decides her own confirmations.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from memory.models import PreferenceRecord
from policy.domain.outcomes import OutcomeStatus
from policy.models import Confirmation
from runs import models as m
from runs import selectors, services
from runs.demo.demo_profiles import load_demo_profiles
from runs.domain import writes
from runs.domain.machine import Status
from runs.domain.state import RunState
from runs.orm.store import OrmRunStore
from runs.start import profiles
from runs.tools.corpus import demo_corpus_dir, document_load
from tests.support.personas import user_fixture

pytestmark = pytest.mark.django_db(transaction=True)

operator = user_fixture("operator", "operator")
alice = user_fixture("alice", "user")

SAVE_PROFILE = "research-save-preference"


def _save_with_alices_approval(run_id: str, by: Any) -> m.Run:
    services.run_advance(run_id=run_id)
    waiting = m.Run.objects.get(pk=run_id)
    assert waiting.status == Status.WAITING_CONFIRMATION
    pending = Confirmation.objects.get(pk=waiting.pending_confirmation_id)
    services.confirmation_decide(
        confirmation_id=pending.pk, approved=True, shown_hash=pending.proposal_hash, by=by
    )
    services.run_advance(run_id=run_id)
    return m.Run.objects.get(pk=run_id)


def test_the_demo_save_after_a_version_conflict_is_flagged_and_not_claimed(
    operator: Any, alice: Any
) -> None:
    """The issue's demo case: ``research-save-preference`` for a user who already has a
    citation style. Approved, the write is refused by the tool (PREFERENCE_VERSION_CONFLICT);
    the run completes, and now says so: its answer, its counts, its flag, its ``run.stopped``."""
    for path in sorted(demo_corpus_dir().iterdir()):
        document_load(path=path)
    load_demo_profiles(by=operator)

    first = profiles.run_from_profile(user=alice, ref=SAVE_PROFILE, goal="g", enqueue=False)
    saved = _save_with_alices_approval(first.run_id, alice)
    assert (saved.status, saved.outcome_flag) == ("completed", None)
    assert saved.writes == {"succeeded": 1, "rejected": 0, "failed": 0, "unknown": 0}
    assert saved.answer.endswith("Citations as footnotes from now on.")

    # footnote v1 is there now; the profile's write names no version it read: a conflict.
    second = profiles.run_from_profile(user=alice, ref=SAVE_PROFILE, goal="g", enqueue=False)
    refused = _save_with_alices_approval(second.run_id, alice)
    assert (refused.status, refused.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert refused.writes == {"succeeded": 0, "rejected": 1, "failed": 0, "unknown": 0}
    assert refused.outcome_flag == "writes_not_applied"
    assert "from now on" not in refused.answer
    assert refused.answer.endswith(
        "Could not save citation_style=footnote: PREFERENCE_VERSION_CONFLICT."
    )
    assert PreferenceRecord.objects.get(subject="alice", key="citation_style").version == 1
    stopped = m.TraceEvent.objects.get(run_id=refused.pk, event="run.stopped").details
    assert stopped["writes_rejected"] == 1
    assert stopped["outcome_flag"] == "writes_not_applied"
    # The flagged run, and only it, is what the filter finds.
    assert [r.pk for r in selectors.runs_flagged(m.Run.objects.all())] == [refused.pk]


# Every status with every mix of zero and non-zero counts (the cheap way to cover the rule).
STATES = [
    (status, counts)
    for status in (Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.RUNNING)
    for counts in itertools.product((0, 2), repeat=len(OutcomeStatus))
]


def _state(n: int, status: Status, counts: tuple[int | None, ...]) -> RunState:
    return RunState(
        run_id=f"run_rule_{n}",
        subject="alice",
        goal="g",
        status=status,
        max_steps=5,
        max_tool_calls=5,
        max_repeated_proposal=2,
        deadline_ms=1,
        **dict(zip(writes.FIELDS.values(), counts, strict=True)),
    )


def test_the_sql_filter_is_the_python_rule() -> None:
    """``runs.models.OUTCOME_FLAGGED`` (the filter and its index) and ``writes.outcome_flag``
    (the API, pages and trace) must flag the same runs."""
    store = OrmRunStore()
    cases = [*STATES, (Status.COMPLETED, (None, None, None, None))]  # an uncounted, older run
    expected = set()
    for n, (status, counts) in enumerate(cases):
        state = store.create(
            _state(n, status, counts), grants=[], confirmations=[], planner={"kind": "fixture"}
        )
        if writes.outcome_flag(state.status, writes.counts_of(state)):
            expected.add(state.run_id)
    assert expected  # the table has flagged runs, and unflagged ones
    found = {r.pk for r in selectors.runs_flagged(m.Run.objects.all())}
    assert found == expected
    assert {r.pk for r in m.Run.objects.all() if r.outcome_flag} == expected


def test_the_flagged_page_walks_its_partial_index() -> None:
    """The filter repeats the index's condition, so the database can answer the newest-first
    page from that small index, in its order (no sort). On PostgreSQL with sequential and bitmap
    scans off, the plan shows it can (a query whose condition did not imply the index's could not
    use it at all; a bitmap scan would sort, and whether the planner prefers one depends on what
    earlier tests left in the table's statistics); SQLite, which has no statistics here, picks it
    over the status index."""
    query = selectors.runs_flagged(m.Run.objects.all()).order_by("-created_at", "-id")[:51]
    sql, params = query.query.sql_with_params()
    # In a transaction of its own: SET LOCAL outside one changes nothing (a transactional test).
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "run_outcome_flagged" in plan, plan
    assert "Sort" not in plan, plan  # PostgreSQL: the index's order is the page's
    assert "TEMP B-TREE" not in plan, plan  # SQLite: likewise


def test_runs_from_before_the_outcome_migration_keep_null_counts() -> None:
    """A run already there when the run-outcome migration ran was never counted: NULL, shown as "not
    recorded", never a 0 that would say no write of it was refused. New runs count from 0."""
    executor = MigrationExecutor(connection)
    # This change's migration and what it follows, read from the graph: the names stay right
    # if a merge renumbers it behind another app change.
    [target] = [k for k in executor.loader.graph.nodes if k[0] == "runs" and "run_outcome" in k[1]]
    after = [target]
    before = [d for d in executor.loader.graph.nodes[target].dependencies if d[0] == "runs"]
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps.get_model("runs", "Run")
        old.objects.create(
            id="run_old", subject="alice", goal="g", status="completed", max_steps=1,
            max_tool_calls=1, max_repeated_proposal=1, deadline_ms=1,
        )  # fmt: skip
        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())
    row = m.Run.objects.get(pk="run_old")
    assert row.writes is None
    assert (row.outcome_flag, row.writes_text) == (None, "not recorded")
    fresh = RunState(run_id="run_new", subject="alice", goal="g", max_steps=1, max_tool_calls=1,
                     max_repeated_proposal=1, deadline_ms=1)  # fmt: skip
    OrmRunStore().create(fresh, grants=[], confirmations=[], planner={})
    assert m.Run.objects.get(pk="run_new").writes == {
        "succeeded": 0, "rejected": 0, "failed": 0, "unknown": 0,
    }  # fmt: skip
