"""The admin reads "Ledger entries", not Django's "Ledger entrys" (issue 24 item 7). Options only:
nothing in the database changes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0015_provenance"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="ledgerentry",
            options={"ordering": ["id"], "verbose_name_plural": "ledger entries"},
        ),
    ]
