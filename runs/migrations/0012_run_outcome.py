from django.db import migrations, models

# Issue 21 item 2: what a run's writes came to, counted as it goes (runs.domain.writes).
#
# Each count is added without a default first, so the runs already there keep NULL: they were
# never counted, and a 0 would say "no write was rejected" about a run nobody looked at. Only
# then does the field get its default (Django's, not the database's), so every run created from
# now on starts at 0.

COUNTS = ("writes_succeeded", "writes_rejected", "writes_failed", "writes_unknown")


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0011_model_calls"),
    ]

    operations = [
        *(
            migrations.AddField(
                model_name="run", name=name, field=models.PositiveIntegerField(null=True)
            )
            for name in COUNTS
        ),
        *(
            migrations.AlterField(
                model_name="run",
                name=name,
                field=models.PositiveIntegerField(null=True, default=0),
            )
            for name in COUNTS
        ),
        # The runs list's outcome filter: a partial index of the flagged runs only.
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(
                    ("status", "completed"),
                    models.Q(
                        ("writes_rejected__gt", 0),
                        ("writes_failed__gt", 0),
                        ("writes_unknown__gt", 0),
                        _connector="OR",
                    ),
                ),
                fields=["status", "-created_at", "-id"],
                name="run_outcome_flagged",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("writes_failed__isnull", True),
                        ("writes_rejected__isnull", True),
                        ("writes_succeeded__isnull", True),
                        ("writes_unknown__isnull", True),
                    ),
                    models.Q(
                        ("writes_failed__isnull", False),
                        ("writes_rejected__isnull", False),
                        ("writes_succeeded__isnull", False),
                        ("writes_unknown__isnull", False),
                    ),
                    _connector="OR",
                ),
                name="run_writes_counted_together",
            ),
        ),
    ]
