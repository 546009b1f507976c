"""HTTP API acceptance tests (issue 5, SPEC §7): every route for every persona, the error shape,
session/CSRF and token auth, the 20-way approval race and a bounded schemathesis run.

The personas (``people`` fixture) and what each may do: tests/support/personas.py.

Every client except ``anonymous`` authenticates with ``Authorization: Token ...``; session auth
(and its CSRF check) has its own tests in test_auth.py.

No Celery worker runs here: ``runs.services.enqueue_advance`` is replaced by a recorder
(``enqueued``), so a run the API creates, resumes or cancels is enqueued into a list the test
can read, and no message is left on a broker (on the filesystem broker a message file would stay
in var/broker/queue for the next real worker; with REDIS_URL it would wait in Redis). Runs are put
into the states a test needs in-process (``api_kit``: ``runs.start.scenarios.run_scenario``).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from runs import services
from tests.api.api_kit import People, ensure_roles


@pytest.fixture(autouse=True)
def quiet_client_errors(caplog: pytest.LogCaptureFixture) -> None:
    """Django logs every 4xx as a warning (with the request); hundreds of refusals are what these
    tests are made of. Server errors (ERROR) are still logged."""
    caplog.set_level(logging.ERROR, logger="django.request")


@pytest.fixture(autouse=True)
def run_output_root(settings: Any, tmp_path: Path) -> Path:
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = str(tmp_path)
    return tmp_path


class Enqueued(list):
    """Run ids handed to the queue, in order (thread-safe: the live server appends too)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def record(self, run_id: str, *, queue: str | None = None) -> None:
        with self.lock:
            self.append(run_id)


@pytest.fixture(autouse=True)
def enqueued(monkeypatch: pytest.MonkeyPatch) -> Enqueued:
    """Replace the only way the services reach the broker. ``transaction.on_commit`` callbacks
    run only on a real commit: in a ``django_db`` test wrap the request in
    ``django_capture_on_commit_callbacks(execute=True)`` to see them."""
    calls = Enqueued()
    monkeypatch.setattr(services, "enqueue_advance", calls.record)

    def no_broker(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an API test tried to publish a Celery message")

    from runs.tasks import advance_run

    monkeypatch.setattr(advance_run, "apply_async", no_broker)
    return calls


@pytest.fixture
def people() -> People:
    """The personas (see the module docstring for each one's rights)."""
    ensure_roles()
    return People()
