# Issue 24 item 1: a waiting proposal may be edited (a new confirmation, edited from the old) or
# answered with a note; the old confirmation ends "edited" or "responded".

from django.db import migrations, models

STATUSES = [
    "pending", "approved", "declined", "consumed", "expired", "edited", "responded",
]  # fmt: skip


class Migration(migrations.Migration):
    dependencies = [
        ("policy", "0007_mcp"),
    ]

    operations = [
        migrations.AddField(
            model_name="confirmation",
            name="edited_from",
            field=models.CharField(blank=True, default="", max_length=128),
        ),
        migrations.AddField(
            model_name="confirmation",
            name="edit_diff",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="confirmation",
            name="status",
            field=models.CharField(choices=[(s, s) for s in STATUSES], max_length=16),
        ),
        migrations.RemoveConstraint(
            model_name="confirmation",
            name="confirmation_status_valid",
        ),
        migrations.AddConstraint(
            model_name="confirmation",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", STATUSES)),
                name="confirmation_status_valid",
            ),
        ),
    ]
