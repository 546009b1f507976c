"""The same loop beside LangGraph, on the same database, in the same run (issue 13 item 2).

The loop shape is the one ``bench.core`` measures for us: a planner output proposing one no-op
tool call, the tool, everything persisted before the next step.

* **agentconsole**: ``Runner`` + ``OrmRunStore``, fixture planner, the ``bench_noop`` read tool
  (two commits per step: intent before the tool, outcome after).
* **LangGraph**: a ``planner`` node returning an ``AIMessage`` with one tool call and a ``tool``
  node returning its ``ToolMessage``, ``add_messages`` state, ``PostgresSaver`` with
  ``durability="sync"`` (each super-step's checkpoint is written before the next one starts:
  two checkpoints per step, the same durability promise as ours).

Every ratio is taken from figures measured side by side, interleaved (ours, theirs, ours, …), so
a machine that gets busier halfway hurts both. LangGraph is optional (the ``bench`` extra:
``pip install -e '.[bench]'``); without it the peer figures say so instead of failing.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.core import SLICE
from bench.support.harness import ROOT, Context, percentile, ratios, relative, step_times, summary

RATE_STEPS = 200
GROWTH_STEPS = 1000
REPS = 3
CHUNK = SLICE  # growth steps per turn, ours then theirs: a worker's slice


def _langgraph() -> Any:
    """The LangGraph modules, or None when the ``bench`` extra is not installed."""
    try:
        from langchain_core.messages import AIMessage, ToolMessage
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.graph.message import add_messages
    except ImportError:
        return None
    return {
        "AIMessage": AIMessage,
        "ToolMessage": ToolMessage,
        "PostgresSaver": PostgresSaver,
        "END": END,
        "START": START,
        "StateGraph": StateGraph,
        "add_messages": add_messages,
    }


class _LangGraphLoop:
    """The peer loop. ``run(thread, steps)`` runs ``steps`` planner→tool steps on one thread and
    returns the wall time of each step (tool node entry to the next tool node entry: the
    checkpoint writes of both super-steps fall inside)."""

    def __init__(self, lg: dict[str, Any], saver: Any) -> None:
        from typing import Annotated, TypedDict

        add_messages = lg["add_messages"]

        # The functional form: this module's string annotations would not resolve here.
        State = TypedDict(  # noqa: UP013
            "State", {"messages": Annotated[list[Any], add_messages], "limit": int, "i": int}
        )

        self.marks: list[float] = []
        ai, tool_message = lg["AIMessage"], lg["ToolMessage"]

        def planner(state: Any) -> dict[str, Any]:
            i = state.get("i", 0) + 1
            call = {"name": "bench_noop", "args": {"i": i}, "id": f"call-{i}"}
            return {"messages": [ai(content="", tool_calls=[call])], "i": i}

        def tool(state: Any) -> dict[str, Any]:
            self.marks.append(time.perf_counter())
            call = state["messages"][-1].tool_calls[0]
            return {"messages": [tool_message(content='{"ok": true}', tool_call_id=call["id"])]}

        def more(state: Any) -> str:
            return "planner" if state["i"] < state["limit"] else lg["END"]

        graph = lg["StateGraph"](State)
        graph.add_node("planner", planner)
        graph.add_node("tool", tool)
        graph.add_edge(lg["START"], "planner")
        graph.add_edge("planner", "tool")
        graph.add_conditional_edges("tool", more)
        self.graph = graph.compile(checkpointer=saver)

    def run(self, thread: str, steps: int, *, start_at: int = 0) -> list[float]:
        self.marks = []
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 4 * steps + 10}
        begin = time.perf_counter()
        self.graph.invoke({"limit": start_at + steps}, config, durability="sync")
        return step_times(begin, self.marks, time.perf_counter())


def _ours(steps: int) -> tuple[str, Any]:
    from bench import core

    # A few steps of headroom: the resume figure takes more steps on the same run.
    run_id = core._new_run(steps + 10)
    runner = core._runner(steps)
    core._one_step(runner, run_id)  # created -> running
    return run_id, runner


def _our_steps(steps: int) -> tuple[str, list[float]]:
    from bench import core

    run_id, runner = _ours(steps)
    # One advance, as LangGraph's one invoke: each step timed from tool call to tool call.
    return run_id, core._steps(runner, run_id, steps)


def _our_bytes(run_id: str) -> int:
    """Bytes of every row the run wrote (pg_column_size of the whole row, heap only)."""
    from django.db import connection

    tables = [
        ("runs_traceevent", "run_id"),
        ("runs_observation", "run_id"),
        ("runs_ledgerentry", "run_id"),
        ("memory_workingmemoryitem", "run_id"),
        ("runs_run", "id"),
    ]
    total = 0
    with connection.cursor() as cur:
        for table, column in tables:
            cur.execute(
                f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t WHERE {column} = %s",
                [run_id],
            )
            total += int(cur.fetchone()[0])
    return total


def _their_bytes(conn: Any, thread: str) -> int:
    total = 0
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        row = conn.execute(
            f"SELECT coalesce(sum(pg_column_size(t.*)), 0) AS n FROM {table} t "
            "WHERE thread_id = %s",
            (thread,),
        ).fetchone()
        total += int(row["n"])  # the saver's connection returns dicts
    return total


def _p50_ms(latencies: list[float], lo: int, hi: int) -> float:
    return percentile([x * 1000 for x in latencies[lo:hi]], 50)


def _first_step_ms(fn: Callable[[], Any], reps: int = 5) -> list[float]:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return times


def _growth_figures(latencies: list[float], last: int, steps: int) -> dict[str, float]:
    """The last ten steps against steps 10-20 (``relative``)."""
    return relative(latencies[last:steps], latencies[9:20])


def bench_langgraph_peer(ctx: Context) -> dict[str, Any]:
    if ctx.vendor != "postgresql":
        return {"step_vs_langgraph": {"skipped": "needs PostgreSQL (LangGraph's PostgresSaver)"}}
    lg = _langgraph()
    if lg is None:
        return {
            "step_vs_langgraph": {
                "skipped": "LangGraph is not installed: pip install -e '.[bench]' (the bench extra)"
            }
        }
    import psycopg
    from psycopg.rows import dict_row

    url = ctx.database_url.replace("postgres://", "postgresql://", 1)
    with psycopg.Connection.connect(
        url, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        saver = lg["PostgresSaver"](conn)
        saver.setup()
        loop = _LangGraphLoop(lg, saver)
        return _measure(ctx, loop, conn)


def _growth(loop: _LangGraphLoop, growth_steps: int) -> tuple[str, list[float], str, list[float]]:
    """One run of ours and one LangGraph thread of ``growth_steps`` steps, with each step's time."""
    from bench import core

    our_run, runner = _ours(growth_steps)
    thread = f"growth-{uuid.uuid4().hex[:8]}"
    ours: list[float] = []
    theirs: list[float] = []
    # Interleaved in chunks, so load that comes and goes lands on both curves alike. Each chunk
    # is one advance of ours and one invoke of LangGraph's: its first step also loads the run
    # (the thread's checkpoint).
    for start in range(0, growth_steps, CHUNK):
        ours += core._steps(runner, our_run, CHUNK)
        theirs += loop.run(thread, CHUNK, start_at=start)
    return our_run, ours, thread, theirs


def _resume(
    loop: _LangGraphLoop, our_run: str, thread: str, growth_steps: int
) -> tuple[dict[str, float], list[int]]:
    """One step taken cold on the long run / thread, and on a fresh one, for both."""
    from bench import core

    # Resume: a worker that starts cold on a run of ``growth_steps`` steps and takes one more,
    # against the same on a fresh run. Ours: a new Runner (nothing cached) and one step.
    def our_resume() -> None:
        with contextlib.suppress(RuntimeError):
            core._runner(1).advance(our_run, max_iterations=1)

    def our_fresh() -> None:
        run_id, _ = _ours(2)
        core._one_step(core._runner(2), run_id)

    done = [growth_steps]

    def their_resume() -> None:
        loop.run(thread, 1, start_at=done[0])
        done[0] += 1

    def their_fresh() -> None:
        loop.run(f"fresh-{uuid.uuid4().hex[:8]}", 1)

    runs = {
        "ours": _first_step_ms(our_resume),
        "ours_fresh": _first_step_ms(our_fresh),
        "theirs": _first_step_ms(their_resume),
        "theirs_fresh": _first_step_ms(their_fresh),
    }
    resume: dict[str, Any] = {f"{k}_ms": summary(v) for k, v in runs.items()}
    for side in ("ours", "theirs"):
        resume[f"{side}_ratio"] = relative(runs[side], runs[f"{side}_fresh"])
    return resume, done


def _measure(ctx: Context, loop: _LangGraphLoop, conn: Any) -> dict[str, Any]:

    ours_rates, theirs_rates = [], []
    for _ in range(REPS):  # interleaved: ours, theirs, ours, ...
        _, lat = _our_steps(RATE_STEPS)
        ours_rates.append((RATE_STEPS - 1) / sum(lat[1:]))
        lat = loop.run(f"rate-{uuid.uuid4().hex[:8]}", RATE_STEPS)
        theirs_rates.append((RATE_STEPS - 1) / sum(lat[1:]))

    growth_steps = GROWTH_STEPS if ctx.time_left() > 240 else 300
    our_run, ours, thread, theirs = _growth(loop, growth_steps)
    last = growth_steps - 10

    resume, done = _resume(loop, our_run, thread, growth_steps)
    ours_bytes = _our_bytes(our_run) / growth_steps
    theirs_bytes = _their_bytes(conn, thread) / done[0]
    _plot(ours, theirs, ctx)

    ours_med, theirs_med = summary(ours_rates)["median"], summary(theirs_rates)["median"]
    shape = (
        f"{RATE_STEPS - 1} timed steps of one no-op tool call each, {REPS} interleaved reps, "
        "same PostgreSQL database"
    )
    return {
        "langgraph_steps_per_s": {
            **summary(theirs_rates),
            "how": f"LangGraph planner→tool graph, add_messages, PostgresSaver durability=sync; "
            f"{shape}",
        },
        "peer_persisted_steps_per_s": {
            **summary(ours_rates),
            "how": f"Runner + OrmRunStore, fixture planner, bench_noop; {shape}",
        },
        "step_vs_langgraph": {
            "value": ours_med / theirs_med,
            **ratios(ours_rates, theirs_rates),
            "target": 3.0,
            "how": "peer_persisted_steps_per_s / langgraph_steps_per_s: value from the medians; "
            "median/min/max/n of the ratio rep by rep (interleaved)",
        },
        "step_latency_at": {
            "ours_step_10_ms": _p50_ms(ours, 9, 20),
            f"ours_step_{growth_steps}_ms": _p50_ms(ours, last, growth_steps),
            "ours_growth": _growth_figures(ours, last, growth_steps),
            "theirs_step_10_ms": _p50_ms(theirs, 9, 20),
            f"theirs_step_{growth_steps}_ms": _p50_ms(theirs, last, growth_steps),
            "theirs_growth": _growth_figures(theirs, last, growth_steps),
            "target_ours_growth": 1.10,
            "how": f"one run / thread of {growth_steps} steps each, interleaved in chunks of "
            f"{CHUNK}; growth: p50 of the last 10 steps / p50 of steps 10-20 (median/min/max/n: "
            "each of the last 10 over that p50)",
        },
        "resume_latency": {
            **resume,
            "target_ours_ratio": 1.2,
            "how": f"5 reps each: one step taken cold (new Runner / new invoke) on a run of "
            f"{growth_steps} steps, against one step of a fresh run; ratio: p50 / fresh p50 "
            "(median/min/max/n: each rep over the fresh p50)",
        },
        "bytes_per_step": {
            "ours": ours_bytes,
            "theirs": theirs_bytes,
            "n_steps_ours": growth_steps,
            "n_steps_theirs": done[0],
            "how": "an exact count, not a sample (so no median/min/max): sum of pg_column_size "
            "of every row the run / thread wrote, divided by its n steps (ours: trace, "
            "observations, ledger, working memory, run row; theirs: checkpoints, "
            "checkpoint_blobs, checkpoint_writes)",
        },
    }


def _plot(ours: list[float], theirs: list[float], ctx: Context) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        ctx.notes.append("bench/step_latency.png not drawn: matplotlib is not installed")
        return
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(range(1, len(ours) + 1), [x * 1000 for x in ours], lw=0.8, label="agentconsole")
    ax.plot(range(1, len(theirs) + 1), [x * 1000 for x in theirs], lw=0.8, label="LangGraph")
    ax.set_xlabel("step index (same run / thread)")
    ax.set_ylabel("ms per step")
    ax.set_yscale("log")
    ax.set_title("Per-step latency against run length, PostgreSQL, same machine and run")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(ROOT / "bench" / "step_latency.png")
    plt.close(fig)
