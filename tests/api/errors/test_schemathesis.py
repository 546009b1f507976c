"""schemathesis against /api/schema/: every operation, valid and invalid generated requests, a
bounded number of examples (derandomized: the same work on every run, so no time budget is
asserted), one check: no 5xx.

The schema is loaded from the app itself (``schemathesis.openapi.from_wsgi``) and every request
goes through Django's WSGI handler in this thread. The test is transactional: requests commit for
real (as in production, where a failed request cannot poison the next one), and the database is
flushed afterwards, so nothing is left for other tests. The caller is the admin (the widest
rights, so generated requests get past the permission checks); path parameters are generated,
and also set to ids of real objects so that generated bodies reach the services.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.api import api_kit as kit

MAX_EXAMPLES = 5  # per strategy: valid, invalid, and valid with ids of real objects


def real_ids(people: kit.People) -> dict[str, Any]:
    alice = people.alice.user
    waiting = kit.waiting_run(alice)
    handed = kit.handoff_run(alice)
    kit.preference_set(people.admin.user, "answer_language", "en")
    change = kit.pending_change(people.admin.user, "answer_language", "fr")
    return {
        "run_id": waiting.run_id,
        "confirmation_id": waiting.confirmation_id,
        "handoff_id": handed.handoff_id,
        "change_id": change.pk,
        "key": "answer_language",
    }


def explore(operation: Any, strategies: list[Any], auth: dict[str, str]) -> tuple[int, list[str]]:
    """Run the generated cases of one operation; (calls made, server errors seen)."""
    calls, failures = 0, []

    @given(case=st.one_of(strategies))
    @settings(
        max_examples=MAX_EXAMPLES * len(strategies),
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: report, don't minimise
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        nonlocal calls
        calls += 1
        response = case.call(headers=auth)
        if response.status_code >= 500:
            failures.append(
                f"{response.status_code} {case.method} {case.formatted_path} "
                f"query={case.query!r} body={case.body!r}"[:500]
            )

    run()
    return calls, failures


@pytest.fixture
def one_connection() -> Iterator[None]:
    """Keep this thread's database connection across requests, as Django's test client does
    (the handler would otherwise close and reopen it around every request: CONN_MAX_AGE=0).
    The test is transactional, so each request still commits on its own."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.mark.django_db(transaction=True)
def test_generated_requests_never_get_a_server_error(
    people: kit.People, one_connection: None
) -> None:
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler())
    ids = real_ids(people)
    auth = {"Authorization": f"Token {people.admin.token}"}
    failures: list[str] = []
    calls = 0
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25, [op.label for op in operations]

    for operation in operations:
        names = {p.name for p in operation.path_parameters}
        fixed = {k: v for k, v in ids.items() if k in names}
        strategies = [operation.as_strategy(generation_mode=mode) for mode in GenerationMode]
        if fixed:
            strategies.append(
                operation.as_strategy(
                    generation_mode=GenerationMode.POSITIVE, path_parameters=fixed
                )
            )
        made, failed = explore(operation, strategies, auth)
        calls += made
        failures += failed

    assert calls >= len(operations) * 2
    assert not failures, f"{len(failures)} server errors in {calls} calls:\n" + "\n".join(
        sorted(set(failures))[:40]
    )
