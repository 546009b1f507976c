"""A worker goes on from the state its own commit made instead of loading the run again
(``OrmRunStore.inputs_kept``, issue 22: fewer round trips per step). That is only sound if what
the store carries is what a load would read: the run row, and the inputs of its version
(grants with their uses, confirmations, working memory after eviction, the planner
configuration, the ledger's started row, the latest model call).

Each test runs real runs through the real runner and store, with a store that, whenever the
runner asks whether it may go on from a state, reads everything again and records any
difference. A carry rule that forgets a grant use, evicts differently or keeps a stale call
makes these fail.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentconsole import wiring
from agentconsole.kernel import sqlbatch
from policy import selectors as policy_selectors
from runs.domain.runner import Runner
from runs.domain.state import RunState
from runs.orm import step_inputs
from runs.orm import store as run_store
from runs.orm.rows import working_items
from tests.calls import calls_kit as kit
from tests.services.services_kit import MEMORY_GRANT, create_run, save_language, search

pytestmark = pytest.mark.django_db(transaction=True)


class CheckingStore(run_store.OrmRunStore):
    """The worker's store, comparing each carried state and its inputs with a fresh read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.carried = 0
        self.differences: list[str] = []
        self.moves: list[str] = []  # "load" (with inputs), "apply", "carry", in order

    def load(self, run_id: str, *, inputs: bool = False) -> RunState:
        if inputs:
            self.moves.append("load")
        return super().load(run_id, inputs=inputs)

    def apply(self, commit: Any, *, decided_by: Any = None) -> RunState:
        self.moves.append("apply:confirmation" if commit.confirmation_request else "apply")
        return super().apply(commit, decided_by=decided_by)

    def inputs_kept(self, state: RunState) -> bool:
        kept = super().inputs_kept(state)
        if kept:
            self.carried += 1
            self.moves.append("carry")
            self._compare(state)
        return kept

    def _compare(self, state: RunState) -> None:
        run_id, version = state.run_id, state.version
        cached = self._inputs(run_id, version)
        assert cached is not None
        fresh_state = self.load(run_id)  # no inputs: the thread's kept inputs stay as they are
        fresh: dict[str, Any] = {
            "state": fresh_state.model_dump(),
            "grants": policy_selectors.run_grants(run_id=run_id),
            "confirmations": policy_selectors.run_confirmations(run_id=run_id),
            "working": working_items(run_id),
            "planner": self.planner_config(run_id),
        }
        carried: dict[str, Any] = {
            "state": state.model_dump(),
            "grants": list(cached.grants),
            "confirmations": list(cached.confirmations),
            "working": list(cached.working),
            "planner": cached.planner,
        }
        (started_rows,) = sqlbatch.fetch([step_inputs.started_read(run_id)])
        (call_rows,) = sqlbatch.fetch([step_inputs.latest_call_read(run_id)])
        if not isinstance(cached.started, step_inputs.Unknown):
            fresh["started"] = step_inputs.started_from_rows(started_rows)
            carried["started"] = cached.started
        if not isinstance(cached.call, step_inputs.Unknown):
            fresh["call"] = step_inputs.call_from_rows(call_rows)
            carried["call"] = cached.call
        for name, value in fresh.items():
            if carried[name] != value:
                self.differences.append(f"v{version} {name}: {carried[name]!r} != {value!r}")


def checking_runner(**kw: Any) -> tuple[Runner, CheckingStore]:
    runner = wiring.runner(**kw)
    store = CheckingStore(on_commit_events=getattr(runner.store, "on_commit_events", None))
    runner.store = store
    return runner, store


def test_a_long_run_goes_on_from_what_it_committed_and_that_is_what_a_load_reads() -> None:
    # 30 searches with distinct results: grant uses every step, working memory over its caps
    # (12 items), so eviction runs in the carried inputs as in the writer.
    outputs = [search(f"p{i}", f"retry rule {i}") for i in range(1, 31)]
    run_id = create_run(outputs, max_steps=35, max_tool_calls=35).run_id
    runner, store = checking_runner()

    state = runner.advance(run_id)

    assert state.status.value in ("completed", "failed"), state.status
    assert state.step >= 30
    assert store.carried >= 60  # after each intent and each outcome of 30 tool steps
    assert store.differences == []


def test_a_confirmation_is_never_carried_the_run_is_read_again() -> None:
    # The proposal waits for a person: that commit writes a confirmation (the database decides
    # it), so the runner does not go on from it.
    outputs = [save_language("p1", "fr")]
    run_id = create_run(outputs, grants=[MEMORY_GRANT]).run_id
    runner, store = checking_runner()

    state = runner.advance(run_id)

    assert state.status.value == "waiting_confirmation"
    after = store.moves[store.moves.index("apply:confirmation") + 1 :]
    assert after == ["load"], store.moves
    assert store.differences == []


def test_a_model_run_split_at_its_calls_carries_its_consumed_call(endpoint: Any) -> None:
    run_id = kit.start_run("what is the retry rule?")
    runner, store = checking_runner(defer_calls=True)
    state = runner.advance(run_id)
    for _ in range(6):
        if state.status.value != "running":
            break
        kit.drain(kit.gateway())
        runner, store2 = checking_runner(defer_calls=True)
        state = runner.advance(run_id)
        store.carried += store2.carried
        store.differences += store2.differences

    assert state.status.value == "completed"
    assert store.carried >= 3
    assert store.differences == []
