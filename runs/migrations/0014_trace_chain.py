"""The trace's hash chain (issue 23 item 5, runs.domain.trace_chain).

The digest columns are added without a default, so the events already stored keep NULL: they
were never chained, and the runs they belong to keep a NULL head (``Run.trace_head``) and read
as "not chained". Only then does ``trace_head`` get its default (Django's, not the database's):
every run created from now on starts its chain at "".

The append-only trigger of 0007 is replaced by one that also refuses rewriting the chain's
digests and scheme; ``details`` and ``erased_digest`` stay writable to the erase. Nullable
columns without a default are added in place on SQLite too (no table rebuild), so its trigger
is not dropped by the additions; it is created again here with the new column list.
"""

from django.db import migrations, models

COLUMNS = (
    "id, run_id, sequence, event, proposal_id, created_at, content_digest, chain_digest, "
    "hash_scheme"
)
OLD_COLUMNS = "id, run_id, sequence, event, proposal_id, created_at"
MESSAGE = "TRACE_APPEND_ONLY: a trace event is never rewritten"


def _trigger(columns: str) -> dict[str, list[str]]:
    return {
        "postgresql": [
            "DROP TRIGGER IF EXISTS runs_trace_append_only ON runs_traceevent;",
            f"""
            CREATE TRIGGER runs_trace_append_only BEFORE UPDATE OF {columns} ON runs_traceevent
            FOR EACH ROW EXECUTE FUNCTION runs_trace_append_only();
            """,
        ],
        "sqlite": [
            "DROP TRIGGER IF EXISTS runs_trace_append_only;",
            f"""
            CREATE TRIGGER runs_trace_append_only BEFORE UPDATE OF {columns} ON runs_traceevent
            BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;
            """,
        ],
    }


def _run(statements: dict[str, list[str]]):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return run


DIGESTS = (
    ("content_digest", 64),
    ("chain_digest", 64),
    ("erased_digest", 64),
    ("hash_scheme", 8),
)


class Migration(migrations.Migration):
    dependencies = [("runs", "0013_call_kinds")]

    operations = [
        *(
            migrations.AddField(
                model_name="traceevent",
                name=name,
                field=models.CharField(max_length=length, null=True),
            )
            for name, length in DIGESTS
        ),
        migrations.AddField(
            model_name="run", name="trace_head", field=models.CharField(max_length=64, null=True)
        ),
        migrations.AlterField(
            model_name="run",
            name="trace_head",
            field=models.CharField(max_length=64, null=True, default=""),
        ),
        migrations.RunPython(_run(_trigger(COLUMNS)), _run(_trigger(OLD_COLUMNS))),
    ]
