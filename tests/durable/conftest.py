"""Durable execution, in-process: leases, crash recovery, unknown outcomes, retries,
cancellation, deadlines, handoffs and isolated tools (SPEC §4-§5; seed §7, §13-§15).

Runs are driven through the services (``run_create``, ``run_advance``, ``run_cancel``), the
sweeper and the management commands, never a Celery worker. Tools run in threads with their own
database connection, so every test commits for real (``django_db(transaction=True)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentconsole import wiring
from tests.plugins import durable_tools
from tests.support.runs import use_run_output_root
from tests.support.workers import worker_database_url

PLUGINS = "tests.plugins.durable_tools"


@pytest.fixture(autouse=True)
def run_output_root(settings: Any, tmp_path: Path) -> Path:
    return use_run_output_root(settings, tmp_path / "run-output-root")


@pytest.fixture(autouse=True)
def faults_enabled(settings: Any) -> None:
    """These tests inject faults in-process (a run's ``faults`` block); off by default."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = True


@pytest.fixture(autouse=True)
def plugin_tools(settings: Any) -> Any:
    settings.AGENTCONSOLE_TOOLS = [PLUGINS]
    wiring.registry.cache_clear()
    durable_tools.reset()
    yield durable_tools
    wiring.registry.cache_clear()
    durable_tools.reset()


@pytest.fixture
def child_env(monkeypatch: pytest.MonkeyPatch, transactional_db: None) -> None:
    """The isolated tool's child process sees the test database and the plugin tools."""
    monkeypatch.setenv("DATABASE_URL", worker_database_url())
    monkeypatch.setenv("AGENTCONSOLE_TOOLS", PLUGINS)
