"""After a transactional test the database is empty as Django's flush leaves it
(tests/support/session/flush.py): every table but the content types and permissions."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import TransactionTestCase

from runs import services
from runs.domain.budgets import RunBudgets
from tests.support.personas import make_user
from tests.support.races import require_postgres
from tests.support.session import flush

pytestmark = pytest.mark.django_db(transaction=True)


def _rows() -> dict[str, int]:
    return {
        m._meta.db_table: m._base_manager.count()
        for m in apps.get_models(include_auto_created=True)
    }


def test_every_table_but_the_kept_two_is_emptied() -> None:
    require_postgres()
    flush.remember_kept(connection.alias)  # as after Django's flush
    kept = (ContentType.objects.count(), Permission.objects.count())
    user = make_user("flushed", "operator")
    user.user_permissions.add(Permission.objects.first())
    services.run_create(
        subject="flushed", goal="a run to delete", budgets=RunBudgets(max_steps=2),
        grants=[], planner={"kind": "fixture", "outputs": []},
    )  # fmt: skip
    assert {t for t, n in _rows().items() if n} > {"runs_run", "runs_traceevent", "auth_user"}
    assert flush.empty_database(connection.alias)
    assert {t for t, n in _rows().items() if n} == set(flush.KEPT)
    assert (ContentType.objects.count(), Permission.objects.count()) == kept
    assert not Group.objects.exists()  # the migration's role groups go, as with Django's flush


def test_a_changed_content_type_table_gets_djangos_flush() -> None:
    require_postgres()
    flush.remember_kept(connection.alias)
    assert flush.empty_database(connection.alias)
    ContentType.objects.filter(app_label="runs").first().delete()  # type: ignore[union-attr]
    assert not flush.empty_database(connection.alias)  # nothing done: Django's flush will be


def test_without_reference_counts_djangos_flush_runs_first(monkeypatch: pytest.MonkeyPatch) -> None:
    require_postgres()
    monkeypatch.setattr(flush, "_references", {})
    assert not flush.empty_database(connection.alias)


def test_the_suite_uses_it() -> None:
    assert TransactionTestCase._fixture_teardown is flush._fixture_teardown
