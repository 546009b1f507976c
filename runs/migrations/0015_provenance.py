from django.db import migrations, models

# Issue 23 items 1-2: the run's provenance index (runs.TaintEntry) and what it holds
# (Run.taint_chars).
#
# ``taint_chars`` is added without a default first, so the runs already there keep NULL: their
# untrusted content was never indexed, and NULL makes their writes fail closed (every argument
# counts as untrusted-derived). Only then does it get its default (Django's), so every run
# created from now on starts at 0.


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_trace_chain"),
    ]

    operations = [
        migrations.AddField(
            model_name="run", name="taint_chars", field=models.PositiveIntegerField(null=True)
        ),
        migrations.AlterField(
            model_name="run",
            name="taint_chars",
            field=models.PositiveIntegerField(null=True, default=0),
        ),
        migrations.CreateModel(
            name="TaintEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.PositiveBigIntegerField()),
                ("observation_id", models.CharField(max_length=64)),
                ("trust", models.CharField(max_length=32)),
                ("text", models.TextField()),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=models.deletion.PROTECT,
                        related_name="taint_entries",
                        to="runs.run",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run", "seq"), name="taint_entry_run_seq_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("trust__in", ["trusted-tool", "untrusted-content"])),
                        name="taint_entry_trust_valid",
                    ),
                ],
            },
        ),
    ]
