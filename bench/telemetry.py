"""What tracing costs a persisted step (issue 12 item 4): ``BENCH=otel_overhead make bench``.

The same persisted step as ``core.bench_persisted_steps`` (Runner + OrmRunStore, a no-op read
tool), with telemetry off (the default no-op port) and on (an SDK provider whose batch processor
exports to memory), interleaved rep by rep so that a busy machine slows both alike. Also the
no-op port's own cost per span, against the time of a step: what "off" adds.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from bench.core import _new_run, _noop_contract, _one_step
from bench.support.harness import Context, ratios, summary

STEPS = int(os.environ.get("BENCH_OTEL_STEPS", "150"))
REPS = int(os.environ.get("BENCH_OTEL_REPS", "5"))
# Spans a step of the bench tool opens: planner.step, policy.evaluate, tool.<name> (one per
# iteration of advance(max_iterations=1); the run span is one per advance, here one per step).
SPANS_PER_STEP = 4


def _runner(telemetry: Any) -> Any:
    from django.db import connections

    from agentconsole import wiring
    from policy.domain.registry import ToolRegistry
    from runs.domain.planning import FixturePlanner
    from runs.domain.runner import Runner
    from runs.engine.executor import ThreadExecutor
    from runs.orm.store import OrmRunStore

    registry = ToolRegistry([*wiring.builtin_contracts(), _noop_contract()])
    return Runner(
        store=OrmRunStore(),
        registry=registry,
        executor=ThreadExecutor(
            registry=registry,
            on_thread_exit=connections.close_all,
            trace_headers=telemetry.trace_headers,
        ),
        planner_for=lambda cfg: FixturePlanner(cfg["outputs"]),
        telemetry=telemetry,
    )


def _steps_per_s(telemetry: Any) -> float:
    run_id = _new_run(STEPS)
    runner = _runner(telemetry)
    _one_step(runner, run_id)  # created -> running
    start = time.perf_counter()
    for _ in range(STEPS - 1):
        _one_step(runner, run_id)
    return (STEPS - 1) / (time.perf_counter() - start)


def _noop_span_ns(n: int = 200_000) -> float:
    from runs.domain.telemetry import NOOP_TELEMETRY

    span = NOOP_TELEMETRY.span
    start = time.perf_counter()
    for _ in range(n):
        with span("planner.step") as s:
            s.set({})
    return (time.perf_counter() - start) / n * 1e9


def bench_otel_overhead(ctx: Context) -> dict[str, Any]:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentconsole.ops import telemetry
    from runs.domain.telemetry import NOOP_TELEMETRY

    memory = InMemorySpanExporter()
    on = telemetry.build(service_name="bench", processors=[BatchSpanProcessor(memory)])
    off_rates: list[float] = []
    on_rates: list[float] = []
    try:
        for rep in range(REPS):
            # Interleaved, the order flipped every rep: drift (a busy neighbour, a warming
            # cache) lands on both sides.
            pair = [(off_rates, NOOP_TELEMETRY), (on_rates, on)]
            for rates, port in pair if rep % 2 == 0 else reversed(pair):
                rates.append(_steps_per_s(port))
            on.provider.force_flush()
            memory.clear()
            if ctx.time_left() < 30:
                ctx.notes.append(f"otel overhead cut after {rep + 1} reps (time budget)")
                break
    finally:
        on.shutdown()
    off_median = statistics.median(off_rates)
    on_median = statistics.median(on_rates)
    noop_ns = _noop_span_ns()
    step_ns = 1e9 / off_median
    return {
        "otel_off_steps_per_s": {**summary(off_rates), "how": f"{STEPS - 1} steps, no-op port"},
        "otel_on_steps_per_s": {
            **summary(on_rates),
            "how": "SDK provider, BatchSpanProcessor to an in-memory exporter",
        },
        "otel_on_vs_off": {
            "value": on_median / off_median,
            **ratios(on_rates, off_rates),
            "how": "median steps/s on / off (1.0 = no cost), reps interleaved; median/min/max/n "
            "of the ratio rep by rep",
        },
        "otel_off_noop_cost_pct": {
            "value": 100 * SPANS_PER_STEP * noop_ns / step_ns,
            "noop_span_ns": noop_ns,
            "how": f"{SPANS_PER_STEP} no-op spans per step x ns per no-op span / ns per step, "
            "in percent of a step",
        },
    }
