"""The runs pages of issue 24 item 5: a run names the profile it was started from ("run again"),
and the list's stop-reason and tool filters walk an index each."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_ledger_entry_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="profile",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="runs",
                to="runs.runprofile",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["stop_reason", "-created_at"], name="run_stop_reason_created"
            ),
        ),
        migrations.AddIndex(
            model_name="ledgerentry",
            index=models.Index(fields=["tool_name", "run"], name="ledger_tool_run"),
        ),
    ]
