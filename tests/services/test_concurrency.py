"""Real races on PostgreSQL: twenty threads, twenty connections, one run.

Each thread waits on a barrier, then writes; the database decides. The compare-and-set on the
run version (and on the confirmation's status) must let exactly one writer through; everyone
else gets a conflict and leaves no trace.
"""

from __future__ import annotations

import pytest

from agentconsole import wiring
from policy.domain.errors import DomainError
from policy.models import Confirmation as ConfirmationRow
from policy.models import Grant
from runs import models as m
from runs import services
from runs.domain import lifecycle
from runs.domain import trace as ev
from runs.domain.errors import VersionConflict
from runs.domain.machine import Status
from runs.domain.step.decide import decide
from tests.services.services_kit import MEMORY_GRANT, create_run, save_language, search, trace
from tests.support.races import THREADS, race

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_twenty_commits_from_one_loaded_state_exactly_one_applies(postgres_only: None) -> None:
    run_id = create_run([search("p1", "retry exhausted")]).run_id
    store = wiring.store()
    store.apply(lifecycle.start(store.load(run_id)))
    loaded = store.load(run_id)
    before = trace(run_id)
    # Twenty writers that all read the same state decide the same step.
    commits = [
        decide(
            loaded,
            search("p1", "retry exhausted"),
            source="fixture",
            grants=store.grants(run_id),
            confirmations=store.confirmations(run_id),
            registry=wiring.registry(),
            lookups=store.lookups(run_id),
            now_ms=loaded.deadline_ms - 60_000,
        )
        for _ in range(THREADS)
    ]
    assert all(c.command is not None for c in commits)

    results = race(lambda i: wiring.store().apply(commits[i]))

    applied = [r for r in results if not isinstance(r, BaseException)]
    conflicts = [r for r in results if isinstance(r, VersionConflict)]
    assert len(applied) == 1, results
    assert len(conflicts) == THREADS - 1, results
    new_events = [e.event for e in commits[0].events]
    assert trace(run_id) == before + list(enumerate(new_events, start=len(before) + 1))
    run = m.Run.objects.get(pk=run_id)
    assert (run.version, run.trace_seq, run.tool_calls) == (
        loaded.version + 1,
        len(before) + len(new_events),
        1,
    )
    assert m.LedgerEntry.objects.filter(run_id=run_id).count() == 1
    assert Grant.objects.get(run_id=run_id).calls_used == 1


def test_twenty_approvals_of_one_confirmation_exactly_one_decides(postgres_only: None) -> None:
    run_id = create_run([save_language("p1", "en")], [MEMORY_GRANT]).run_id
    waiting = services.run_advance(run_id=run_id)
    assert waiting.status is Status.WAITING_CONFIRMATION
    row = ConfirmationRow.objects.get(pk=waiting.pending_confirmation_id)
    before = trace(run_id)

    results = race(
        lambda i: services.confirmation_decide(
            confirmation_id=row.pk, approved=True, shown_hash=row.proposal_hash, by=f"reviewer{i}"
        )
    )

    decided = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, DomainError)]
    assert len(decided) == 1, results
    assert len(refused) == THREADS - 1, results
    assert {e.code for e in refused} == {"CONFIRMATION_NOT_PENDING"}, results
    row.refresh_from_db()
    assert row.status == "approved"
    run = m.Run.objects.get(pk=run_id)
    assert (run.status, run.version) == (Status.RUNNING.value, waiting.version + 1)
    added = trace(run_id)[len(before) :]
    assert [name for _, name in added].count(ev.CONFIRMATION_DECIDED) == 1
    assert added == [(len(before) + i, name) for i, (_, name) in enumerate(added, start=1)]
