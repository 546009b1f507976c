"""Services on the ORM: every test commits for real (``django_db(transaction=True)``), so that
threads and other connections see the rows."""

from __future__ import annotations

import pytest
from django.db import connection


@pytest.fixture
def postgres_only() -> None:
    """Row locks and truly concurrent writers: SQLite serializes all writers, so a race test
    there would prove nothing."""
    if connection.vendor != "postgresql":
        pytest.skip(
            f"needs PostgreSQL (DATABASE_URL=postgres://...); this run uses {connection.vendor}"
        )
