"""Every test in this folder takes ``adapter`` and so runs twice (STYLE habit 2: one conformance
suite, two adapters): against the in-memory reference
(``runs.domain.inmemory_store.InMemoryRunStore``) and against the ORM adapter
(``runs.orm.store.OrmRunStore``, inside pytest-django's per-test transaction).
"""

from __future__ import annotations

import pytest

from tests.conformance.conformance_kit import MemoryAdapter, OrmAdapter


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("orm", id="orm", marks=pytest.mark.django_db),
    ]
)
def adapter(request: pytest.FixtureRequest) -> MemoryAdapter | OrmAdapter:
    return MemoryAdapter() if request.param == "memory" else OrmAdapter()
