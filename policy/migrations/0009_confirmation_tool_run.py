"""The runs list's tool filter (issue 24 item 5): runs with a confirmation of a tool."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("policy", "0008_confirmation_edit_respond"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="confirmation",
            index=models.Index(fields=["tool_name", "run"], name="confirmation_tool_run"),
        ),
    ]
