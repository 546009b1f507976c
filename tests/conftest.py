"""Shared pytest fixtures for the agentconsole test suite.

Layout mirrors the code: one folder per layer or subsystem, e.g. tests/domain (no database),
tests/conformance, tests/services, tests/api, tests/realtime, tests/workers, tests/faults,
tests/browser, tests/architecture.
"""

import gc
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from tests.support.races import require_postgres
from tests.support.runs import load_demo_corpus
from tests.support.session import flush, parallel, passwords, template_db


def pytest_configure(config: pytest.Config) -> None:
    """The process that starts the run names its template database
    (tests/support/session/template_db.py); parallel processes inherit the name."""
    if not hasattr(config, "workerinput"):
        template_db.choose()


def pytest_unconfigure(config: pytest.Config) -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not hasattr(config, "workerinput") and template_db.on_postgres(url):
        template_db.drop(url)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The collected tests live as long as the run: out of the collector's sight, as the
    process's start is (agentconsole/apps.py). A tenth of the form sweeps' CPU was the
    collector walking them again and again."""
    gc.freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    """Parallel processes (``make test``): a Redis database each
    (tests/support/session/parallel.py), the run's template database's name."""
    parallel.give_each_worker_its_redis(specs)
    for spec in specs:
        spec.env[template_db.TEMPLATE_ENV] = os.environ[template_db.TEMPLATE_ENV]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The browser tests in one process, worker tests a module at a time (parallel.py)."""
    return parallel.make_scheduler(config, log)


@pytest.fixture(scope="session", autouse=True)
def quick_password_hashes() -> Iterator[None]:
    """Production's PBKDF2, one iteration (tests/support/session/passwords.py)."""
    with override_settings(PASSWORD_HASHERS=passwords.HASHERS):
        yield


@pytest.fixture(scope="session", autouse=True)
def deletes_after_transactional_tests() -> None:
    """On PostgreSQL a transactional test's rows are deleted, not truncated, and the content
    types and permissions kept (tests/support/session/flush.py)."""
    flush.install()


@pytest.fixture(autouse=True)
def private_cache(settings: Any) -> None:
    """The sign-in throttle and the run-creation rate count in the cache (Redis with REDIS_URL,
    kept between runs): a key prefix per test, so no test inherits another's failed sign-ins or
    started runs (user ids repeat from test to test)."""
    caches = {name: dict(config) for name, config in settings.CACHES.items()}
    for config in caches.values():
        config["KEY_PREFIX"] = f"test-{uuid.uuid4().hex[:12]}"
    settings.CACHES = caches  # Django drops its cache connections on this change


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Servers keep connections open (CONN_MAX_AGE); tests close them, so no thread of the test
    process holds the test database when it is flushed or dropped. On PostgreSQL the test
    database is a copy of the run's migrated template (tests/support/session/template_db.py)."""
    from django.conf import settings

    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    url = os.environ.get("DATABASE_URL", "")
    if template_db.on_postgres(url):
        settings.DATABASES["default"].setdefault("TEST", {})["TEMPLATE"] = template_db.ensure(url)


@pytest.fixture(scope="session")
def trace_readers_closed(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """For tests that run the live trace's consumer in this process: its reader threads keep
    their connections (runs.consumers), closed before the test database is dropped (this
    fixture's teardown runs before that one's)."""
    yield
    from runs import consumers  # import here: Django is set up only once the session starts

    with django_db_blocker.unblock():
        consumers.close_readers()


@pytest.fixture
def postgres_only() -> None:
    """For race tests: SQLite serializes every writer, so they skip there."""
    require_postgres()


@pytest.fixture
def corpus(transactional_db: None) -> None:
    """The demo corpus ``search_public`` reads, committed so a tool thread sees it."""
    load_demo_corpus()
