"""Parallel test processes (tests/support/session/parallel.py): each gets a Redis database of its
own, the browser tests a subfolder at a time and the tests sharing a module's fixture are handed
out together."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from django.conf import settings

from tests.support.session import parallel


def test_each_process_has_a_redis_database_of_its_own() -> None:
    dbs = [parallel.redis_url_for("redis://127.0.0.1:6379/6", i, 3) for i in range(3)]
    assert dbs == [f"redis://127.0.0.1:6379/{n}" for n in (6, 7, 8)]
    # CI's 15 is the last database: the others count down, never over to 0 (make run's).
    ci = [parallel.redis_url_for("redis://127.0.0.1:6379/15", i, 2) for i in range(2)]
    assert ci == ["redis://127.0.0.1:6379/15", "redis://127.0.0.1:6379/14"]
    # No database named: Redis's 0. A password and options stay as they were.
    assert parallel.redis_url_for("redis://127.0.0.1:6379", 1, 2) == "redis://127.0.0.1:6379/1"
    assert (
        parallel.redis_url_for("redis://:pw@host:6380/3?socket_timeout=5", 1, 2)
        == "redis://:pw@host:6380/4?socket_timeout=5"
    )
    assert parallel.redis_url_for("", 1, 2) == ""  # no Redis, nothing shared
    with pytest.raises(ValueError, match="17 test processes"):
        parallel.redis_url_for("redis://127.0.0.1:6379/0", 1, 17)


def test_the_workers_environment_gets_its_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/15")
    specs = [SimpleNamespace(env={}), SimpleNamespace(env={})]
    parallel.give_each_worker_its_redis(specs)
    assert [s.env["REDIS_URL"] for s in specs] == [
        "redis://127.0.0.1:6379/15",
        "redis://127.0.0.1:6379/14",
    ]
    monkeypatch.delenv("REDIS_URL")
    bare = [SimpleNamespace(env={})]
    parallel.give_each_worker_its_redis(bare)
    assert bare[0].env == {}


def test_this_process_reads_the_url_it_was_given() -> None:
    """Settings, the Celery broker and the processes tests start all read one URL: the one
    in this process's environment (a worker's own, under xdist)."""
    url = os.environ.get("REDIS_URL", "")
    assert url == settings.REDIS_URL
    if url:
        assert url == settings.CELERY_BROKER_URL
        assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] == [url]
        assert settings.CACHES["default"]["LOCATION"] == url


def test_units() -> None:
    unit = parallel.unit_of
    assert unit("tests/browser/queue/test_queue.py::test_decline[390x844]") == "tests/browser/queue"
    assert unit("tests/browser/queue/test_four_eyes.py::test_x") == "tests/browser/queue"
    assert unit("tests/browser/pages/test_csp.py::test_x[admin]") == "tests/browser/pages"
    assert unit("tests/browser/test_x.py::test_x") == "tests/browser"
    assert unit("tests/workers/test_worker_runs.py::test_x") == "tests/workers/test_worker_runs.py"
    assert (
        unit("tests/api/access/test_auth.py::test_x[a::b]")
        == "tests/api/access/test_auth.py::test_x[a::b]"
    )


def test_every_test_sharing_a_fixture_is_handed_out_with_the_others(
    request: pytest.FixtureRequest,
) -> None:
    """A new module-scoped worker or stack in a folder not grouped yet would start once per
    process: name its folder in ``parallel.BY_MODULE``. (Checks the tests of this session:
    all of them in a full run.)"""
    alone = [
        item.nodeid
        for item in request.session.items
        if parallel.shares_module_fixture(item)
        and parallel.unit_of(item.nodeid) == item.nodeid
        and item.module is not request.module  # the example below: a fixture that costs nothing
    ]
    assert alone == []


@pytest.fixture(scope="module")
def once_per_module() -> int:
    return 1


def test_a_module_fixture_is_seen(request: pytest.FixtureRequest, once_per_module: int) -> None:
    assert parallel.shares_module_fixture(request.node)


def test_a_plugins_or_a_function_fixture_is_not(request: pytest.FixtureRequest) -> None:
    assert not parallel.shares_module_fixture(request.node)
