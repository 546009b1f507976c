"""Working memory on real runs (seed §2.2; issue 4 item 1): derived data — dropping it and
rebuilding it from the observations (``memory.services.working_memory_rebuild``) gives exactly the
view the steps built; expired items stay out of the view. Bounds over a long run:
``test_working_memory_long.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentconsole import wiring
from memory.models import WorkingMemoryItem
from memory.services import working_memory_rebuild
from runs.selectors import planner_context
from tests.memory.memory_kit import as_rows, observations_of, stored_items, view_of

pytestmark = pytest.mark.django_db

BATCH = [
    "mem-ok",  # a write
    "mem-poisoned-retrieval",  # a semantic rejection
    "mem-grant-other-subject",  # an authorization rejection
    "mem-human-approves",  # a confirmation pause, approved
    "mem-poisoned-whitelisted",  # a confirmation pause, declined (a rejection)
    "mem-confirmation-replayed",  # ends waiting for a person
    "mem-stale-version",  # a tool outcome that is a conflict
]


@pytest.fixture(scope="module")
def ran(scenario_batch) -> dict[str, Any]:
    """The runs, committed once for the module; each test's own writes (a rebuild, an injected
    row) are rolled back when it ends."""
    return scenario_batch(BATCH)


def test_expired_items_are_not_in_the_view_even_when_still_stored(ran):
    result = ran["mem-ok"].result
    run_id, step = result.run_id, result.state["step"]
    WorkingMemoryItem.objects.create(
        run_id=run_id,
        item_id="wm-stale",
        kind="observation",
        content="stale",
        trust="trusted-tool",
        source_ids=["tool-0"],
        created_at_step=1,
        expires_after_step=step - 1,
        seq=999,
    )

    shown = [i["item_id"] for i in planner_context(run_id=run_id)["observations"]]
    assert "wm-stale" not in shown
    assert shown  # the rest of the view is still there
    # Far enough ahead, every tool result has expired; only the never-expiring request may stay.
    later = wiring.store().working_view(run_id, step + 50)
    assert [i.item_id for i in later] == ["wm-user-1"]


@pytest.mark.parametrize("name", BATCH)
def test_drop_and_rebuild_gives_the_incrementally_builtview_of(ran, name):
    result = ran[name].result
    run_id = result.run_id
    incremental = as_rows(view_of(run_id))
    shown = as_rows(planner_context(run_id=run_id)["observations"])
    assert shown == incremental
    assert incremental, "an empty view would prove nothing"
    assert len(observations_of(run_id)) >= 3

    WorkingMemoryItem.objects.filter(run_id=run_id).delete()
    assert working_memory_rebuild(run_id=run_id) == len(incremental)

    assert as_rows(view_of(run_id)) == incremental
    assert stored_items(run_id) == incremental
    assert as_rows(planner_context(run_id=run_id)["observations"]) == incremental
    # Rebuilding again is a no-op.
    working_memory_rebuild(run_id=run_id)
    assert stored_items(run_id) == incremental


def test_rebuild_keeps_the_order_keys_of_the_steps(ran):
    """seq (the tie-breaker of the eviction order) is rebuilt too, not only the visible fields."""
    result = ran["mem-poisoned-whitelisted"].result
    run_id = result.run_id
    before = list(
        WorkingMemoryItem.objects.filter(run_id=run_id)
        .order_by("created_at_step", "seq")
        .values_list("item_id", "seq")
    )
    working_memory_rebuild(run_id=run_id)
    after = list(
        WorkingMemoryItem.objects.filter(run_id=run_id)
        .order_by("created_at_step", "seq")
        .values_list("item_id", "seq")
    )
    kept = {i for i, _ in after}
    assert [row for row in before if row[0] in kept] == after
