"""Services on the ORM: every test commits for real (``django_db(transaction=True)``), so that
threads and other connections see the rows."""

from __future__ import annotations
