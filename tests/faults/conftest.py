"""Fault tests run on the real stack: the test database, a real broker and real Celery worker
processes. Each test module defines a module-scoped ``workers`` fixture (its own cluster from
``tests.faults.fault_kit.cluster``, with the environment its faults need); ``stack`` below gives
a test that cluster with this process configured like the workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentconsole import wiring
from tests.faults.fault_kit import PLUGIN, Cluster


@pytest.fixture(autouse=True)
def faults_enabled(settings: Any) -> None:
    """This process creates runs with ``faults`` blocks; the workers get the same switch from
    their environment (``fault_kit.cluster``, ``runs.fault_lab.faultlab.worker_process``)."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = True


@pytest.fixture
def stack(workers: Cluster, settings: Any) -> Iterator[Cluster]:
    """The module's cluster; this process sees the same plugin tools and run-output root."""
    settings.AGENTCONSOLE_TOOLS = [PLUGIN]
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = workers.output_root
    wiring.registry.cache_clear()
    yield workers
    wiring.registry.cache_clear()
