"""Memory governance acceptance tests (issue 4): fixtures shared by this folder.

Scenario tests run files through ``run_fixture --json``. Tools run in a thread with their own
database connection, so the rows a run needs must be committed: a test that runs scenarios itself
uses ``django_db(transaction=True)``. Runs that many tests only look at are made once per module
by ``scenario_batch`` (committed, then deleted when the module is done): a flush per test costs
about two seconds on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from agentconsole import wiring
from tests.memory.memory_kit import Ran, delete_committed_rows, run_fresh
from tests.support.personas import make_user
from tests.support.runs import load_demo_corpus, use_run_output_root

# The database this process would use outside tests, read when this conftest is imported (at
# collection, before pytest-django creates the test database). A module-scoped batch writes and
# deletes committed rows itself, so it checks it is not talking to this one.
NON_TEST_DATABASE = connection.settings_dict["NAME"]


def refuse_non_test_database() -> None:
    name = connection.settings_dict["NAME"]
    if name == NON_TEST_DATABASE:
        raise RuntimeError(
            f"refusing to write to {name!r}: it is not the test database (pytest-django sets the "
            "test database up only for runs that collect a django_db test: mark the tests that "
            "use scenario_batch with django_db)"
        )


@pytest.fixture(autouse=True)
def run_output_root(settings: Any, tmp_path: Path) -> Path:
    return use_run_output_root(settings, tmp_path / "run-output")


@pytest.fixture(scope="module")
def scenario_batch(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[Sequence[str]], dict[str, Ran]]]:
    """``batch(names)``: run each file once for the module, long-term memory emptied before each
    run, committed; the tests then read the captured results (or the database, rolled back).
    Everything the runs wrote is deleted when the module is done.

    The tests that use it must be marked ``django_db``: pytest-django creates the test database
    only when a collected test asks for one, and this fixture refuses to run otherwise."""
    ran: dict[str, Ran] = {}
    used: list[bool] = []

    def batch(names: Sequence[str]) -> dict[str, Ran]:
        output = tmp_path_factory.mktemp("batch-run-output")
        with django_db_blocker.unblock(), override_settings(AGENTCONSOLE_RUN_OUTPUT_ROOT=output):
            refuse_non_test_database()
            if not used:
                used.append(True)
                load_demo_corpus()
            for name in names:
                if name not in ran:
                    ran[name] = run_fresh(name)
        return {name: ran[name] for name in names}

    yield batch
    if used:
        with django_db_blocker.unblock():
            refuse_non_test_database()
            delete_committed_rows()


@pytest.fixture
def users() -> dict[str, Any]:
    """alice and bob (group user), an admin (group admin), a superuser and an operator
    (tests/support/personas.py). Database access comes from the requesting test's
    ``django_db`` mark."""
    return {
        "alice": make_user("alice", "user"),
        "bob": make_user("bob", "user"),
        "admin": make_user("ada", "admin"),
        "root": make_user("root", superuser=True),
        "operator": make_user("otto", "operator"),
    }


@pytest.fixture
def memory_keys(settings: Any) -> Iterator[Callable[[Sequence[Mapping[str, Any]]], None]]:
    """Reconfigure the memory key whitelist for one test (and rebuild what caches it)."""

    def configure(keys: Sequence[Mapping[str, Any]]) -> None:
        settings.AGENTCONSOLE_MEMORY_KEYS = list(keys)
        wiring.memory_policies.cache_clear()
        # The save_preference contract is built from the policies when the registry is built.
        wiring.registry.cache_clear()

    yield configure
    wiring.memory_policies.cache_clear()
    wiring.registry.cache_clear()
