"""The profile a run was started from, by name (issue 24 item 4: notifications per profile).
Runs from before: "" (no profile known)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_ledger_entry_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="profile",
            field=models.CharField(blank=True, default="", max_length=63),
        ),
    ]
