"""issue 9 item 17: the trace is append-only. Every way the application could change or remove
an event raises and leaves the row as it was; the database refuses a rewrite of an event's
identity even to raw SQL (runs migration 0007), and a test database still empties (flush)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from runs import models as m
from runs.models import AppendOnlyError
from tests.services.services_kit import create_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def event() -> m.TraceEvent:
    state = create_run([])
    return m.TraceEvent.objects.get(run_id=state.run_id, sequence=1)


def _row(pk: int) -> dict:
    return m.TraceEvent.objects.filter(pk=pk).values().get()


def test_save_on_an_existing_event_raises_and_changes_nothing(event):
    """issue 9 item 17: save() of a loaded event is refused by the model itself."""
    before = _row(event.pk)
    event.event = "run.rewritten"
    event.details = {"forged": True}
    with pytest.raises(AppendOnlyError):
        event.save()
    with pytest.raises(AppendOnlyError):
        event.save(update_fields=["details"])
    assert _row(event.pk) == before


def test_a_new_instance_carrying_an_existing_pk_cannot_overwrite_it(event):
    """issue 9 item 17: Django saves an instance with a pk by UPDATE first; here it inserts."""
    before = _row(event.pk)
    forged = m.TraceEvent(
        pk=event.pk,
        run_id=event.run_id,
        sequence=event.sequence,
        event="x",
        details={},
        created_at=before["created_at"],  # else the UPDATE fails on NOT NULL, by accident
    )
    with pytest.raises(DatabaseError), transaction.atomic():
        forged.save()
    assert _row(event.pk) == before


@pytest.mark.parametrize(
    "change",
    [
        lambda qs, e: qs.update(event="run.rewritten"),
        lambda qs, e: qs.update(details={"forged": True}),
        lambda qs, e: qs.delete(),
        lambda qs, e: e.delete(),
        lambda qs, e: m.TraceEvent.objects.bulk_update(
            [m.TraceEvent(pk=e.pk, event="x", details={})], ["event", "details"]
        ),
        lambda qs, e: m.TraceEvent.objects.bulk_create(
            [m.TraceEvent(run_id=e.run_id, sequence=e.sequence, event="x", details={})],
            update_conflicts=True,
            unique_fields=["run", "sequence"],
            update_fields=["event", "details"],
        ),
    ],
    ids=["update-event", "update-details", "qs-delete", "instance-delete", "bulk-update",
         "upsert"],
)  # fmt: skip
def test_every_queryset_path_that_changes_an_event_raises(event, change):
    """issue 9 item 17: update(), delete(), bulk_update() and an upsert all refuse."""
    before = _row(event.pk)
    count = m.TraceEvent.objects.count()
    with pytest.raises(AppendOnlyError):
        change(m.TraceEvent.objects.filter(pk=event.pk), event)
    assert _row(event.pk) == before
    assert m.TraceEvent.objects.count() == count


@pytest.mark.parametrize("column", ["event", "sequence", "proposal_id", "run_id", "created_at"])
def test_the_database_refuses_to_rewrite_an_events_identity(event, column):
    """issue 9 item 17: raw SQL past the model (a shell, a script) is refused by a trigger."""
    before = _row(event.pk)
    value = {"event": "run.rewritten", "sequence": 99, "proposal_id": "p9",
             "run_id": event.run_id, "created_at": before["created_at"]}[column]  # fmt: skip
    table = m.TraceEvent._meta.db_table
    with (
        pytest.raises(DatabaseError, match="TRACE_APPEND_ONLY"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            f"UPDATE {table} SET {column} = %s WHERE id = %s",  # noqa: S608 -- fixed names
            [value, event.pk],
        )
    assert _row(event.pk) == before


def test_a_test_database_still_flushes_with_the_trigger_in_place(event):
    """issue 9 item 17: the trigger has no DELETE arm, so Django's flush (DELETE on SQLite,
    TRUNCATE on PostgreSQL) still empties the trace between transactional tests."""
    assert m.TraceEvent.objects.exists()
    call_command("flush", "--no-input", verbosity=0)
    assert not m.TraceEvent.objects.exists()
