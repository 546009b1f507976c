"""PostgreSQL gets a statement's parameters apart from its text (``DB_SERVER_SIDE_BINDING``, on
by default: agentconsole/settings.py), so psycopg does not quote every value into the SQL in
Python: about 15 % less CPU across web, workers and PostgreSQL in the runs-in-flight benchmark
(docs/benchmarks.md). Prepared statements stay off (Django's default)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

pytestmark = pytest.mark.django_db


def test_statements_travel_with_their_parameters_apart(postgres_only: None) -> None:
    from django.db.backends.postgresql.base import ServerBindingCursor

    # A value quoting would have to escape, and one PostgreSQL stores as text as given.
    name = "o'brien \\ %s $1"
    get_user_model().objects.create(username=name)
    assert list(
        get_user_model().objects.filter(username=name).values_list("username", flat=True)
    ) == [name]
    assert connection.connection is not None
    assert connection.connection.cursor_factory is ServerBindingCursor
    with connection.cursor() as cursor:  # nothing was prepared: a pooler could still sit between
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)
