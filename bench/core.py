"""In-process benchmarks: the pure gate, the persisted step against a raw-SQL floor, step-cost
growth over a 1,000-step run, and queries per step."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from bench.support.harness import Context, percentile, ratios, relative, step_times, summary

REPS = 5
SLICE = 20  # steps per advance, as settings.AGENTCONSOLE_WORKER_SLICE_STEPS


def _noop_contract():
    from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContract

    return ToolContract(
        name="bench_noop",
        version="1",
        description="Does nothing; returns its input number.",
        input_schema={
            "type": "object",
            "properties": {"i": {"type": "integer"}},
            "required": ["i"],
            "additionalProperties": False,
        },
        output_schema={"type": "object"},
        required_capabilities=("bench:noop",),
        side_effect=SideEffect.READ,
        confirmation=ConfirmationMode.NEVER,
        timeout_ms=5_000,
        execute=_noop,
    )


# When each no-op tool call started (``_steps`` reads them as step boundaries).
_MARKS: list[float] = []


def _noop(args: dict[str, Any], ctx: Any) -> Any:
    from policy.domain.outcomes import ToolOutcome

    _MARKS.append(time.perf_counter())
    return ToolOutcome.succeeded({"i": args["i"]})


def _gate_inputs() -> tuple[Any, list[Any], list[Any], list[dict[str, Any]]]:
    """A running run, its grants and an approved confirmation, and a realistic mix of planner
    outputs (allowed, needing the confirmation, invalid, ungranted, unconfirmed)."""
    from policy.domain.canonical import proposal_hash
    from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
    from policy.domain.gate import RunView
    from policy.domain.grants import CapabilityGrant

    run = RunView(
        run_id="r1",
        subject="alice",
        status="running",
        step=2,
        tool_calls=1,
        max_tool_calls=10,
        deadline_ms=2**62,
    )
    grants = [
        CapabilityGrant(
            grant_id="g1",
            capability="search:public",
            run_id="r1",
            resource_scope="public",
            expires_at_step=10,
        ),
        CapabilityGrant(
            grant_id="g2",
            capability="memory:write",
            run_id="r1",
            resource_scope="alice",
            expires_at_step=10,
        ),
    ]
    pref = {"key": "answer_language", "value": "zh-CN"}
    confirmations = [
        Confirmation(
            confirmation_id="c1",
            run_id="r1",
            tool_name="save_preference",
            proposal_hash=proposal_hash("save_preference", "1", pref),
            status=ConfirmationStatus.APPROVED,
            expires_at_step=10,
        ),
    ]

    def out(pid: str, tool: str, args: Any) -> dict[str, Any]:
        return {
            "kind": "tool",
            "proposal_id": pid,
            "tool_name": tool,
            "tool_version": "1",
            "arguments": args,
            "source_observation_ids": ["user-1"],
        }

    mix = [
        out("p1", "search_public", {"query": "what happens after retries are exhausted"}),
        out("p2", "save_preference", pref),
        out("p3", "search_public", {"query": "x", "bogus": True}),
        out("p4", "write_artifact", {"path": "run-output/a.md", "content": "hello"}),
        out("p5", "save_preference", {"key": "answer_language", "value": "en"}),
    ]
    return run, grants, confirmations, mix


def bench_gate(ctx: Context, *, reps: int = REPS, seconds: float = 1.0) -> dict[str, Any]:
    """Parse + evaluate over a realistic mix, one core, validators compiled once."""
    from agentconsole import wiring
    from policy.domain.gate import evaluate
    from policy.domain.proposals import ActionProposal, parse_planner_output

    def parse(raw: dict[str, Any]) -> ActionProposal:
        # The mix holds tool calls only: a final answer never reaches the gate.
        proposal = parse_planner_output(raw)
        if not isinstance(proposal, ActionProposal):
            raise TypeError(f"the gate's mix holds a final answer: {raw}")
        return proposal

    registry = wiring.registry()
    run, grants, confirmations, mix = _gate_inputs()
    # Provenance on: each proposal's, computed by the runtime against a run that read 50
    # untrusted observations of 6 KB (the gate reads it; its cost is bench_provenance's).
    from bench.provenance import provenance_inputs
    from policy.domain.origins.provenance import compute

    index, people = provenance_inputs()
    computed = {m["proposal_id"]: compute(m["arguments"], index=index, people=people) for m in mix}
    kinds = [
        type(
            evaluate(
                parse(m),
                run=run,
                grants=grants,
                confirmations=confirmations,
                registry=registry,
                now_ms=1,
                provenance=computed[m["proposal_id"]],
            )
        ).__name__
        for m in mix
    ]
    rates = []
    for _ in range(reps):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for raw in mix:
                evaluate(
                    parse(raw),
                    run=run,
                    grants=grants,
                    confirmations=confirmations,
                    registry=registry,
                    now_ms=1,
                    provenance=computed[raw["proposal_id"]],
                )
            n += len(mix)
        rates.append(n / (time.perf_counter() - start))
    return {
        "gate_decisions_per_s": {
            **summary(rates),
            "target": 20_000,
            "how": f"parse + evaluate with each proposal's provenance, mix {kinds}, "
            f"{reps} x {seconds:g} s, one thread",
        }
    }


def _runner(steps: int):
    """A Runner over the ORM store with the built-in tools plus a no-op read tool."""
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
        executor=ThreadExecutor(registry=registry, on_thread_exit=connections.close_all),
        planner_for=lambda cfg: FixturePlanner(cfg["outputs"]),
    )


def _new_run(steps: int) -> str:
    from runs import services
    from runs.domain.budgets import RunBudgets
    from runs.start.limits import RunLimits

    outputs = [
        {
            "kind": "tool",
            "proposal_id": f"p{i}",
            "tool_name": "bench_noop",
            "tool_version": "1",
            "arguments": {"i": i},
        }
        for i in range(steps)
    ]
    state = services.run_create(
        subject="bench",
        goal="benchmark",
        budgets=RunBudgets(max_steps=steps + 1, max_tool_calls=steps + 1, deadline_ms=3_600_000),
        grants=[{"capability": "bench:noop", "resource_scope": "*", "expires_at_step": steps + 1}],
        planner={"kind": "fixture", "outputs": outputs},
        # A measurement, not a user: the per-subject limits (runs.start.limits) would cut it short.
        limits=RunLimits.off(),
    )
    return state.run_id


def _one_step(runner, run_id: str) -> None:
    # One loop iteration = one full step (intent commit, tool call, outcome commit); advance
    # then says "did not settle", which is the point.
    with contextlib.suppress(RuntimeError):
        runner.advance(run_id, max_iterations=1)


def _steps(runner, run_id: str, n: int) -> list[float]:
    """Take ``n`` steps in one advance, as a worker takes its slice (``slice_steps``): the
    planner is built and the run checked for an orphaned command once per advance, not per
    step. Each step's wall time runs from one tool call's start to the next (the first from the
    call, the last to the return), as the LangGraph peer measures its own steps."""
    _MARKS.clear()
    begin = time.perf_counter()
    runner.advance(run_id, slice_steps=n)
    return step_times(begin, _MARKS, time.perf_counter())


def _queries_in_one_step(runner, run_id: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        _one_step(runner, run_id)
    return len(captured.captured_queries)


def _floor(ctx: Context, inserts: int, updates: int, reps: int = 400) -> float:
    """Raw transactions of a step-transaction's shape: a conditional UPDATE (+ the other
    UPDATEs) and the same number of single-row INSERTs, no ORM, same database."""
    import json

    from django.db import connection

    payload = json.dumps({"event": "tool.completed", "details": {"status": "succeeded"}})
    # Django keeps its connection in autocommit: each statement would commit by itself (and
    # raw.commit() commit nothing). One transaction per rep, as a step's.
    connection.set_autocommit(False)
    raw = connection.connection
    cur = raw.cursor()
    sqlite = connection.vendor == "sqlite"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT" if sqlite else "BIGSERIAL PRIMARY KEY"
    ph = "?" if sqlite else "%s"
    cur.execute("CREATE TABLE IF NOT EXISTS floor_run (id TEXT PRIMARY KEY, version INTEGER)")
    cur.execute(f"CREATE TABLE IF NOT EXISTS floor_row (id {serial}, run_id TEXT, body TEXT)")
    cur.execute(f"INSERT INTO floor_run VALUES ({ph}, 0)", ("r",))
    raw.commit()
    version = 0
    start = time.perf_counter()
    for _ in range(reps):
        cur.execute(
            f"UPDATE floor_run SET version = version + 1 WHERE id = {ph} AND version = {ph}",
            ("r", version),
        )
        for _ in range(max(0, updates - 1)):
            cur.execute(f"UPDATE floor_run SET version = version WHERE id = {ph}", ("r",))
        for _ in range(inserts):
            cur.execute(f"INSERT INTO floor_row (run_id, body) VALUES ({ph}, {ph})", ("r", payload))
        raw.commit()
    elapsed = time.perf_counter() - start
    cur.execute("DROP TABLE floor_row")
    cur.execute("DROP TABLE floor_run")
    raw.commit()
    connection.set_autocommit(True)
    return reps / elapsed


def _shape(queries: list[dict[str, Any]]) -> dict[str, int]:
    kinds = {"SELECT": 0, "INSERT": 0, "UPDATE": 0, "DELETE": 0, "tx": 0}
    for q in queries:
        sql = q["sql"].lstrip().upper()
        for k in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            if sql.startswith(k):
                kinds[k] += 1
        if sql.startswith(("SAVEPOINT", "BEGIN")) or "RELEASE SAVEPOINT" in sql:
            kinds["tx"] += 1
    return kinds


def bench_persisted_steps(ctx: Context) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    steps = 200
    rates: list[float] = []
    cpu_ms: list[float] = []
    shape = None
    for _ in range(REPS):
        run_id = _new_run(steps)
        runner = _runner(steps)
        _one_step(runner, run_id)  # created -> running
        with CaptureQueriesContext(connection) as captured:
            _one_step(runner, run_id)
        shape = _shape(captured.captured_queries)
        cpu = time.process_time()
        latencies = _steps(runner, run_id, steps - 1)
        cpu_ms.append((time.process_time() - cpu) * 1000 / len(latencies))
        rates.append((len(latencies) - 1) / sum(latencies[1:]))
    tx_per_step = 2  # intent commit, outcome commit
    shape = shape or {"INSERT": 0, "UPDATE": 1}
    inserts_per_tx = round(shape["INSERT"] / tx_per_step)
    updates_per_tx = max(1, round(shape["UPDATE"] / tx_per_step))
    floors = [_floor(ctx, inserts_per_tx, updates_per_tx) for _ in range(3)]
    steps_median = summary(rates)["median"]
    floor_median = summary(floors)["median"]
    return {
        "persisted_steps_per_s": {
            **summary(rates),
            "how": f"{REPS} runs x {steps - 2} timed steps of a no-op read tool through Runner "
            f"+ OrmRunStore in one advance, as a worker takes its slice (fixture planner, "
            f"trace, observation, working memory, ledger intent and outcome, version CAS); "
            f"queries in one step taken alone (one advance): {shape}",
        },
        "step_cpu_ms": {
            **summary(cpu_ms),
            "how": "CPU time of the benchmark's process (all its threads) per step, over the same "
            "steps: what the step costs this process, apart from waiting for the database",
        },
        "floor_tx_per_s": {
            **summary(floors),
            "how": f"raw DB-API transactions: {updates_per_tx} UPDATE (first conditional) + "
            f"{inserts_per_tx} single-row INSERTs, 3 x 400, same database, no ORM",
        },
        "transactions_per_step": tx_per_step,
        "step_vs_floor": {
            "value": steps_median / floor_median * tx_per_step,
            **ratios([r * tx_per_step for r in rates], floor_median),
            "target": 0.5,
            "how": "persisted_steps_per_s / floor_tx_per_s x transactions_per_step: value from "
            "the medians; median/min/max/n over the step reps, each against the floor's median",
        },
    }


def bench_step_growth(ctx: Context) -> dict[str, Any]:
    steps = 1000
    run_id = _new_run(steps + 10)
    runner = _runner(steps)
    _one_step(runner, run_id)  # created -> running
    queries = {1: _queries_in_one_step(runner, run_id)}
    latencies: list[float] = []
    while len(latencies) < steps:
        # Slices of a worker's size; each slice's first step also loads the run and builds
        # the planner, as it does in a worker.
        latencies += _steps(runner, run_id, SLICE)
        if ctx.time_left() < 60:
            ctx.notes.append(f"step growth cut at step {len(latencies)} (time budget)")
            break
    last = len(latencies) + 2
    queries[last] = _queries_in_one_step(runner, run_id)
    early = [x * 1000 for x in latencies[9:20]]
    late = [x * 1000 for x in latencies[989:1000]]
    return {
        "step_cost_growth": {
            **(relative(late, early) if late else {"value": float("nan")}),
            "p50_steps_10_20_ms": percentile(early, 50),
            "p50_steps_990_1000_ms": percentile(late, 50),
            "target": 1.10,
            "how": f"one run of {len(latencies)} steps of a no-op read tool, in advances of "
            f"{SLICE} steps (a worker's slice); value: p50 of steps 990-1000 / p50 of steps "
            "10-20; median/min/max/n: each of steps 990-1000 / that p50",
        },
        "queries_per_step": {
            **{f"step_{i}": n for i, n in queries.items()},
            "equal": queries[1] == queries[last],
            "how": f"an exact count, not a sample: django CaptureQueriesContext around step 1 "
            f"and step {last} of the same run, each taken alone in one advance (statements "
            "sent in one pipeline count one each)",
        },
    }
