"""Two worker processes, one queue, 100 runs, every run enqueued twice (issue 3, SPEC §4:
"a run is advanced by one worker at a time").

The duplicate message makes the two workers race for the same run; only the lease (a
conditional UPDATE in the database) decides who advances it. The external effect log never
deduplicates, so a second execution of any command would show as a second line.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from runs import models as m
from runs import services
from tests.faults import fault_kit as fk
from tests.faults.fault_kit import Cluster
from tests.plugins.effect_log import read_store

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNS = 100
WAIT_S = 120
TASK_RESULT = re.compile(r"runs\.advance_run\[[^\]]+\] succeeded in [0-9.e-]+s: '([a-z-]+)'")


@pytest.fixture(scope="module")
def workers(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with fk.cluster(tmp_path_factory, workers=2, concurrency=2) as c:
        yield c


def results(lines: list[str]) -> Counter[str]:
    return Counter(hit.group(1) for line in lines if (hit := TASK_RESULT.search(line)))


def test_two_workers_complete_each_of_100_doubly_enqueued_runs_exactly_once(
    stack: Cluster, settings: Any
) -> None:
    # 100 runs of one subject in flight at once: a load test, not a user (issue 9 item 10).
    settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = 0
    # One clean pass in this process: the trace every run must have, event for event.
    scenario = fk.effect_scenario("append_entry", {"entry": "reference", "hold_ms": 20})
    reference = fk.create(scenario, stack, enqueue=False)
    services.run_advance(run_id=reference)
    expected = [name for _, name, _ in fk.events(reference)]
    assert m.Run.objects.get(pk=reference).status == "completed", expected

    started = time.monotonic()
    run_ids = []
    for i in range(RUNS):
        # hold_ms keeps each tool in flight a little, so duplicates overlap the lease holder.
        run_id = fk.create(
            fk.effect_scenario("append_entry", {"entry": f"e{i}", "hold_ms": 20}), stack
        )
        services.enqueue_advance(run_id, queue=stack.queue)  # the duplicate message
        run_ids.append(run_id)
    runs = fk.wait_rest(run_ids, stack, timeout_s=WAIT_S)
    wall_s = time.monotonic() - started
    # Every message was consumed: 2 per run, none raised.
    fk.wait_for(
        lambda: sum(results(stack.task_lines("succeeded")).values()) >= 2 * RUNS,
        timeout_s=30,
        what=f"{2 * RUNS} advance_run tasks finished",
        c=stack,
    )
    per_worker = [results(w.task_lines("succeeded")) for w in stack.workers]
    total = sum(per_worker, Counter())
    print(
        f"\n{RUNS} runs x 2 messages on 2 workers: {wall_s:.1f} s; task results {dict(total)}; "
        f"per worker {[dict(c) for c in per_worker]}"
    )

    assert {r.status for r in runs.values()} == {"completed"}
    assert stack.task_lines("raised") == []
    assert set(total) <= {"completed", "leased-elsewhere"}, total
    assert sum(total.values()) == 2 * RUNS
    assert all(sum(c.values()) > 0 for c in per_worker), "both workers took messages"
    tokens = []
    for run_id, run in runs.items():
        fk.assert_consistent(run)
        trace = fk.events(run_id)
        assert [name for _, name, _ in trace] == expected, run_id
        ledger = list(run.ledger.values_list("idempotency_token", "status", "attempt"))
        assert [(s, a) for _, s, a in ledger] == [("succeeded", 1)], run_id
        tokens.append(ledger[0][0])
        lines = fk.effects_of(stack, run_id)
        assert [line["token"] for line in lines] == [ledger[0][0]], (run_id, lines)
    assert len(set(tokens)) == RUNS
    applied = Counter(line["token"] for line in read_store(stack.output_root))
    assert [t for t, n in applied.items() if n > 1] == [], "a token executed twice"
