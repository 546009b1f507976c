"""Shared pytest fixtures for the agentconsole test suite.

Layout mirrors the code: tests/domain (no database), tests/conformance, tests/services, tests/api,
tests/realtime, tests/workers, tests/faults, tests/e2e, tests/architecture.
"""

import pytest

from tests.support.races import require_postgres
from tests.support.runs import load_demo_corpus


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Servers keep connections open (CONN_MAX_AGE); tests close them, so no thread of the test
    process holds the test database when it is flushed or dropped."""
    from django.conf import settings

    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0


@pytest.fixture
def postgres_only() -> None:
    """For race tests: SQLite serializes every writer, so they skip there."""
    require_postgres()


@pytest.fixture
def corpus(transactional_db: None) -> None:
    """The demo corpus ``search_public`` reads, committed so a tool thread sees it."""
    load_demo_corpus()
