"""What provenance adds to a step (issue 23): the run's index read and the matching of a
proposal, in a run that read 50 untrusted observations of 6 KB, early and late in the run."""

from __future__ import annotations

import time
from typing import Any

from bench.support.harness import Context, percentile, summary


def _untrusted_texts(observations: int = 50, size: int = 6_000) -> list[str]:
    """The stored text of ``observations`` untrusted results of ``size`` characters of varied
    words, as retrieved text is (the same every time: seeded)."""
    import random

    from policy.domain.origins.taint import entry_text

    rng = random.Random(23)  # noqa: S311 - seeded text, not a secret
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(5000)]
    return [
        entry_text({"results": [{"passage": " ".join(rng.choices(vocab, k=size // 4))[:size]}]})
        for _ in range(observations)
    ]


def provenance_inputs() -> tuple[Any, Any]:
    """A run's index after 50 untrusted observations of 6 KB, and a goal's first-party text."""
    from policy.domain.origins.provenance import first_party
    from policy.domain.origins.taint import UNTRUSTED, Entry, RunIndex, entry_seq

    index = RunIndex()
    for n, text in enumerate(_untrusted_texts()):
        index.extend([Entry(entry_seq(n + 1, UNTRUSTED), f"tool-{n + 1}", UNTRUSTED, text)])
    return index, first_party("Send the weekly numbers to bob@corp.example.", [])


# A proposal of each kind of leaf: a short word, an address, a long body.
PROPOSAL_ARGS = {
    "to": "bob@corp.example",
    "subject": "Weekly numbers",
    "label": "ops",
    "body": "All fine this week; the retry queue is empty and nothing waits. " * 8,
}


def bench_provenance(ctx: Context, *, reps: int = 400) -> dict[str, Any]:
    """What provenance adds to a step (issue 23): the run's index read through the ORM adapter
    (a worker's kept copy plus the entries added since: one indexed query) and ``compute`` over
    a proposal of four leaves, in a run that read 50 untrusted observations of 6 KB, at step 10
    and at step 1,000 (one trusted tool result indexed per step). Also the cold read of the
    whole index by a worker that never saw the run."""
    from policy.domain.origins.provenance import compute
    from policy.domain.origins.taint import TRUSTED, UNTRUSTED, entry_seq, entry_text
    from runs import models as m
    from runs import services
    from runs.domain.budgets import RunBudgets
    from runs.orm import taint_store

    _, people = provenance_inputs()
    texts = _untrusted_texts()
    out: dict[str, Any] = {}
    for steps in (10, 1000):
        state = services.run_create(
            subject="bench",
            goal="Send the weekly numbers to bob@corp.example.",
            budgets=RunBudgets(max_steps=1000, max_tool_calls=1000, max_repeated_proposal=3),
            grants=[],
            planner={"kind": "fixture", "outputs": []},
            enqueue=False,
        )
        rows = [
            m.TaintEntry(
                run_id=state.run_id,
                seq=entry_seq(n + 1, UNTRUSTED),
                observation_id=f"tool-{n + 1}",
                trust=UNTRUSTED,
                text=text,
            )
            for n, text in enumerate(texts)
        ]
        rows += [
            m.TaintEntry(
                run_id=state.run_id,
                seq=entry_seq(100 + i, TRUSTED),
                observation_id=f"tool-{100 + i}",
                trust=TRUSTED,
                text=entry_text({"path": f"run-output/step-{i}.md", "size": i}),
            )
            for i in range(steps)
        ]
        m.TaintEntry.objects.bulk_create(rows, batch_size=500)
        taint_store.forget(state.run_id)
        started = time.perf_counter()
        taint_store.run_index(state.run_id)
        cold_ms = (time.perf_counter() - started) * 1000
        times, reads, computes = [], [], []
        for _ in range(reps):
            started = time.perf_counter()
            kept = taint_store.run_index(state.run_id, 100 + steps - 1)
            read = time.perf_counter()
            compute(PROPOSAL_ARGS, index=kept, people=people)
            done = time.perf_counter()
            times.append((done - started) * 1000)
            reads.append((read - started) * 1000)
            computes.append((done - read) * 1000)
        out[f"provenance_ms_per_step_at_step_{steps}"] = {
            **summary(times),
            "p95": percentile(times, 95),
            "target": 1.0,
            "read_ms_median": round(percentile(reads, 50), 3),
            "compute_ms_median": round(percentile(computes, 50), 3),
            "cold_read_ms": round(cold_ms, 2),
            "how": "run_index (kept copy + one query) + compute, 4 leaves, 50 x 6 KB untrusted",
        }
    return out
