"""The trace is append-only in the database too (issue 9 item 17): a trigger refuses an UPDATE
that rewrites an event's identity (id, run, sequence, event, proposal id, creation time), from
the application, the admin, a shell or raw SQL alike.

Limits, on purpose:
- ``details`` stays writable at the database level: erasure (``runs.privacy.erasure``) replaces erased
  values in it, the one sanctioned rewrite; the model and its queryset refuse every update.
- No DELETE trigger: test databases are emptied with DELETE on SQLite (Django's flush) and by
  ``tests/memory/memory_kit.delete_committed_rows`` on both; a run's events are already kept by
  ``on_delete=PROTECT`` and the queryset/instance ``delete()`` raise.
- SQLite rebuilds a table to alter it, which drops its triggers: a later migration that alters
  ``runs_traceevent`` must create this trigger again.
"""

from django.db import migrations

COLUMNS = "id, run_id, sequence, event, proposal_id, created_at"
MESSAGE = "TRACE_APPEND_ONLY: a trace event is never rewritten"

POSTGRES_UP = [
    f"""
    CREATE OR REPLACE FUNCTION runs_trace_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'integrity_constraint_violation';
    END $$;
    """,
    f"""
    CREATE TRIGGER runs_trace_append_only BEFORE UPDATE OF {COLUMNS} ON runs_traceevent
    FOR EACH ROW EXECUTE FUNCTION runs_trace_append_only();
    """,
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS runs_trace_append_only ON runs_traceevent;",
    "DROP FUNCTION IF EXISTS runs_trace_append_only();",
]
SQLITE_UP = [
    f"""
    CREATE TRIGGER runs_trace_append_only BEFORE UPDATE OF {COLUMNS} ON runs_traceevent
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;
    """,
]
SQLITE_DOWN = ["DROP TRIGGER IF EXISTS runs_trace_append_only;"]


def _run(statements: dict[str, list[str]]):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_subject_usage")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES_UP, "sqlite": SQLITE_UP}),
            _run({"postgresql": POSTGRES_DOWN, "sqlite": SQLITE_DOWN}),
        ),
    ]
