"""The admin reads "Preference history", not Django's "Preference historys" (issue 24 item 7).
Options only: nothing in the database changes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0005_history_reason"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="preferencehistory",
            options={
                "ordering": ["subject", "key", "version", "id"],
                "verbose_name": "preference history entry",
                "verbose_name_plural": "preference history",
            },
        ),
    ]
