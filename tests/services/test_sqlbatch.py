"""A step's reads and writes in one round trip each (``agentconsole.kernel.sqlbatch``,
``runs.orm.store``).

The statements are built from the models' own fields, so what they write must read back through
the ORM exactly as an ORM write would; a batch that loses its compare-and-set must leave nothing
behind, even when the keys it wrote after it were already taken; and the inputs a step read with
its run row answer only for that version.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from agentconsole import wiring
from agentconsole.kernel import sqlbatch
from runs import models as m
from runs.domain import lifecycle
from runs.domain.errors import VersionConflict
from tests.services.services_kit import create_run, search

pytestmark = pytest.mark.django_db(transaction=True)


def _event(run_id: str, sequence: int, details: object) -> m.TraceEvent:
    return m.TraceEvent(run_id=run_id, sequence=sequence, event="test.event", details=details)


def test_an_insert_reads_back_through_the_orm_as_an_orm_write_would() -> None:
    run_id = create_run([search("p1", "x")]).run_id
    details = {"flag": True, "one": 1, "none": None, "text": "zh-CN ✓", "list": [1, "1"]}
    with transaction.atomic():
        ran = sqlbatch.run([sqlbatch.insert([_event(run_id, 900, details)])])
    assert (ran.rowcounts, ran.error) == ([1], None)
    row = m.TraceEvent.objects.get(run_id=run_id, sequence=900)
    assert row.details == details
    assert row.details["flag"] is True
    assert row.details["one"] == 1
    assert row.created_at is not None  # auto_now_add filled by the field's pre_save


def test_select_decodes_json_columns_by_their_fields() -> None:
    run_id = create_run([search("p1", "x")]).run_id
    (rows,) = sqlbatch.fetch(
        [sqlbatch.select(m.Run, ("id", "planner", "citations"), {"id": run_id})]
    )
    assert rows == [(run_id, {"kind": "fixture", "outputs": [search("p1", "x")]}, [])]


def test_a_lost_compare_and_set_with_a_taken_key_is_told_apart_and_leaves_nothing() -> None:
    run_id = create_run([search("p1", "x")]).run_id
    version = m.Run.objects.get(pk=run_id).version
    with transaction.atomic():
        sqlbatch.run([sqlbatch.insert([_event(run_id, 901, {})])])
    cas = sqlbatch.update(m.Run, {"step": 5}, {"id": run_id, "version": version + 1})
    taken = sqlbatch.insert([_event(run_id, 901, {"second": True})])
    fresh = sqlbatch.insert([_event(run_id, 902, {})])
    seen: list[sqlbatch.Ran] = []

    def lose() -> None:
        with transaction.atomic():
            seen.append(sqlbatch.run([cas, fresh, taken]))
            raise RuntimeError("rolled back")  # what the store does on a miss

    with pytest.raises(RuntimeError, match="rolled back"):
        lose()
    # The compare-and-set matched nothing; the taken key is reported, not raised.
    assert seen[0].rowcounts[:2] == [0, 1]
    assert isinstance(seen[0].error, IntegrityError)
    assert not m.TraceEvent.objects.filter(run_id=run_id, sequence=902).exists()
    assert m.TraceEvent.objects.get(run_id=run_id, sequence=901).details == {}
    assert m.Run.objects.get(pk=run_id).step == 0


def test_a_conditional_write_that_changes_no_row_is_named() -> None:
    run_id = create_run([search("p1", "x")]).run_id
    miss = sqlbatch.update(m.Run, {"step": 1}, {"id": run_id, "version": 999}, expect_one="gone")
    hit = sqlbatch.update(m.Run, {"step": 1}, {"id": run_id}, expect_one="never")
    with transaction.atomic():
        ran = sqlbatch.run([hit, miss])
    assert ran.missed([hit, miss]) == "gone"


def test_a_batch_needs_the_callers_transaction() -> None:
    with pytest.raises(RuntimeError, match="transaction"):
        sqlbatch.run([sqlbatch.update(m.Run, {"step": 1}, {"id": "none"})])


def test_inputs_read_with_the_run_answer_for_that_version_only() -> None:
    run_id = create_run([search("p1", "x")]).run_id
    store = wiring.store()
    state = store.load(run_id, inputs=True)
    with CaptureQueriesContext(connection) as kept:
        grants = store.grants(run_id, state.version)
        confirmations = store.confirmations(run_id, state.version)
        view = store.working_view(run_id, state.step, state.version)
    assert kept.captured_queries == []
    assert [g.capability for g in grants] == ["search:public"]
    assert (confirmations, view) == ([], [])

    moved = store.apply(lifecycle.start(state))
    with CaptureQueriesContext(connection) as carried:
        # The commit said what it changed (no grant use): the new version's inputs are known.
        assert store.grants(run_id, moved.version) == grants
    assert carried.captured_queries == []
    with CaptureQueriesContext(connection) as read_again:
        assert store.grants(run_id, state.version) == grants
    assert len(read_again.captured_queries) == 1  # another version: read from the database
    with CaptureQueriesContext(connection) as unversioned:
        store.grants(run_id)
    assert len(unversioned.captured_queries) == 1


def test_a_transaction_of_its_own_commits_its_writes_together() -> None:
    run_id = create_run([search("p1", "x")]).run_id
    version = m.Run.objects.get(pk=run_id).version
    cas = sqlbatch.update(
        m.Run, {"step": 3}, {"id": run_id, "version": version}, expect_one="moved"
    )
    ran = sqlbatch.transaction([cas, sqlbatch.insert([_event(run_id, 903, {"a": 1})])])
    assert (ran.committed, ran.error, ran.missed_at([cas])) == (True, None, None)
    assert m.Run.objects.get(pk=run_id).step == 3
    assert m.TraceEvent.objects.get(run_id=run_id, sequence=903).details == {"a": 1}
    assert not connection.in_atomic_block


@pytest.mark.parametrize("at", [0, 2])
def test_an_unmet_expectation_rolls_a_transaction_back_whole_and_is_named(at: int) -> None:
    run_id = create_run([search("p1", "x")]).run_id
    version = m.Run.objects.get(pk=run_id).version
    hit = sqlbatch.update(m.Run, {"step": 4}, {"id": run_id, "version": version}, expect_one="a")
    miss = sqlbatch.update(m.Run, {"step": 5}, {"id": run_id, "version": 999}, expect_one="b")
    event = sqlbatch.insert([_event(run_id, 904, {})])
    writes = [miss, event, hit] if at == 0 else [hit, event, miss]
    ran = sqlbatch.transaction(writes)
    assert not ran.committed
    assert ran.missed_at(writes) == at
    assert ran.missed(writes) == "b"
    # Nothing stays, the writes before the unmet one included, and the connection is usable.
    assert m.Run.objects.get(pk=run_id).step == 0
    assert not m.TraceEvent.objects.filter(run_id=run_id, sequence=904).exists()
    if connection.vendor == "postgresql":
        assert ran.unmet == at  # checked by the database, before COMMIT
        assert connection.connection.info.transaction_status == sqlbatch.IDLE


def test_a_taken_key_rolls_a_transaction_back_whole_and_is_returned() -> None:
    run_id = create_run([search("p1", "x")]).run_id
    with transaction.atomic():
        sqlbatch.run([sqlbatch.insert([_event(run_id, 905, {})])])
    version = m.Run.objects.get(pk=run_id).version
    cas = sqlbatch.update(m.Run, {"step": 6}, {"id": run_id, "version": version}, expect_one="x")
    writes = [cas, sqlbatch.insert([_event(run_id, 905, {"again": True})])]
    ran = sqlbatch.transaction(writes)
    assert isinstance(ran.error, IntegrityError)
    assert not ran.committed
    assert m.Run.objects.get(pk=run_id).step == 0
    assert m.TraceEvent.objects.get(run_id=run_id, sequence=905).details == {}


def test_a_transaction_of_its_own_refuses_to_run_inside_the_callers() -> None:
    with transaction.atomic(), pytest.raises(RuntimeError, match="of its own"):
        sqlbatch.transaction([sqlbatch.update(m.Run, {"step": 1}, {"id": "none"})])


def test_a_step_commit_outside_any_transaction_is_one_round_trip_and_rings_after_it() -> None:
    """What a worker does: no caller's transaction, nothing written after the batch. BEGIN, the
    writes and COMMIT are sent together; the doorbell rings once, after the commit; a lost
    compare-and-set leaves nothing and rings nothing."""
    run_id = create_run([search("p1", "x")]).run_id
    rings: list[tuple[str, int]] = []
    store = wiring.store()
    store.on_commit_events = lambda run, seq, queues_changed: rings.append((run, seq))
    state = store.load(run_id, inputs=True)  # as a step loads it: no read before the commit
    commit = lifecycle.start(state)
    stale = lifecycle.start(state)
    with CaptureQueriesContext(connection) as captured:
        moved = store.apply(commit)
    sql = [q["sql"] for q in captured.captured_queries]
    if connection.vendor == "postgresql":
        assert (sql[0], sql[-1]) == ("BEGIN", "COMMIT")
        assert sql[1].startswith("WITH w AS (UPDATE")  # the compare-and-set, checked in place
    assert rings == [(run_id, moved.trace_seq)]
    assert m.Run.objects.get(pk=run_id).version == moved.version

    events = m.TraceEvent.objects.filter(run_id=run_id).count()
    with pytest.raises(VersionConflict):
        store.apply(stale)
    assert rings == [(run_id, moved.trace_seq)]
    assert m.TraceEvent.objects.filter(run_id=run_id).count() == events
    assert m.Run.objects.get(pk=run_id).version == moved.version
