"""``run_create``: grants come from the caller and are bound to the run the service creates."""

from __future__ import annotations

import pytest

from agentconsole import wiring
from policy.models import Grant
from runs import models as m
from runs.domain import trace as ev
from runs.domain.machine import Status
from tests.services.services_kit import MEMORY_GRANT, SEARCH_GRANT, create_run, trace

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_create_binds_the_grants_to_the_new_run_id() -> None:
    limited = {
        **MEMORY_GRANT,
        "max_calls": 1,
        "constraints": {"key": {"equals": "answer_language"}},
    }

    first = create_run([], [SEARCH_GRANT, limited])
    second = create_run([], [SEARCH_GRANT, limited])

    assert first.run_id != second.run_id
    for state in (first, second):
        run_id = state.run_id
        rows = list(Grant.objects.filter(run_id=run_id).order_by("id").values_list("id", "run_id"))
        assert rows == [(f"{run_id}:g1", run_id), (f"{run_id}:g2", run_id)]
        bound = sorted(wiring.store().grants(run_id), key=lambda g: g.grant_id)
        assert [g.run_id for g in bound] == [run_id, run_id]
        assert [(g.capability, g.resource_scope) for g in bound] == [
            ("search:public", "public"),
            ("memory:write", "alice"),
        ]
        assert bound[1].max_calls == 1
        assert bound[1].constraints["key"].allows(True, "answer_language")
        assert [g.calls_used for g in bound] == [0, 0]

        assert state.status is Status.CREATED
        assert state.version == 1
        assert trace(run_id) == [(1, ev.RUN_CREATED)]
        assert m.Run.objects.get(pk=run_id).version == 1
    assert Grant.objects.count() == 4
