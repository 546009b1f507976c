"""A real Celery worker process for the tests in this folder (STYLE habit 13: correctness tests
of workers use a real worker, not eager mode); how it finds the test database and the broker:
``tests.support.workers``. Were the worker to ignore its broker folder, the tasks would sit in
the temporary folder and every test here would fail on its bounded wait, log attached.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.workers import Worker, cluster


@pytest.fixture(scope="module")
def celery_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    with cluster(tmp_path_factory, name="test", concurrency=2) as c:
        yield c.workers[0]
