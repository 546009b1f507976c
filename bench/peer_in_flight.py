"""The LangGraph peer of ``bench.runs_in_flight``: the same agent as one asyncio process.

A graph ``model → tool → model → end``: the model node asks the slow OpenAI-compatible server
(``openai.AsyncOpenAI``), the tool node searches the demo corpus in PostgreSQL (the table
``search_public`` reads, the same match: any query term in the body or title, passages scored by
term counts), state checkpointed by ``AsyncPostgresSaver`` with ``durability="sync"`` (each
super-step's checkpoint written before the next starts, as our step commits). N graph
invocations at once; no Django in this process (its memory is the peer's own).

Run by the bench in a process of its own::

    python -m bench.peer_in_flight --n 200 --base-url URL --database-url URL

Prints one JSON object: wall time, per-invocation latencies (seconds), lost invocations, peak
resident memory (``ru_maxrss`` of this process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import sys
import time
import uuid
from typing import Annotated, Any, TypedDict, cast

import httpx
import openai
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

SEARCH_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "search_public",
        "description": "Search the public document corpus; returns passages with citation ids.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
}
CANDIDATES = """SELECT slug, title, body FROM runs_document
WHERE corpus = %s AND (body ILIKE ANY(%s) OR title ILIKE ANY(%s)) ORDER BY slug LIMIT 200"""
WORD = re.compile(r"[A-Za-z0-9]+")


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    goal: str


def _prompt(state: State) -> Any:
    """The goal and every tool result so far, as data lines (what the slow model reads)."""
    lines = [f"Goal (from the user): {state['goal']}", "Observations so far:"]
    n = 0
    for message in state["messages"]:
        if isinstance(message, ToolMessage):
            n += 1
            lines.append(json.dumps({"observation_id": f"tool-{n}", "content": message.content}))
    return [
        {"role": "system", "content": "You are a careful research agent."},
        {"role": "user", "content": "\n".join(lines)},
    ]


class Agent:
    def __init__(self, client: openai.AsyncOpenAI, pool: AsyncConnectionPool) -> None:
        self.client = client
        self.pool = pool

    async def model(self, state: State) -> dict[str, Any]:
        reply = await self.client.chat.completions.create(
            model="slow-model", messages=_prompt(state), tools=[SEARCH_TOOL]
        )
        message = reply.choices[0].message
        calls = [
            {"name": f.name, "args": json.loads(f.arguments), "id": c.id}
            for c in message.tool_calls or []
            if (f := getattr(c, "function", None)) is not None
        ]
        return {"messages": [AIMessage(content=message.content or "", tool_calls=calls)]}

    async def tool(self, state: State) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        results = await self.search(call["args"]["query"], int(call["args"].get("limit", 3)))
        content = json.dumps({"query": call["args"]["query"], "results": results})
        return {"messages": [ToolMessage(content=content, tool_call_id=call["id"])]}

    async def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        words = list(dict.fromkeys(w.lower() for w in WORD.findall(query) if len(w) > 1))[:16]
        patterns = [f"%{w}%" for w in words]
        async with self.pool.connection() as conn:
            cursor = await conn.execute(CANDIDATES, ("public", patterns, patterns))
            rows: list[Any] = await cursor.fetchall()
        hits = []
        for row in rows:
            title_score = sum(row["title"].lower().count(w) for w in words)
            for index, para in enumerate(p.strip() for p in row["body"].split("\n\n")):
                score = sum(para.lower().count(w) for w in words) + 2 * title_score if para else 0
                if score:
                    hits.append((-score, row["slug"], index, para[:600]))
        hits.sort()
        return [{"citation_id": f"{s}#{i}", "passage": p} for _, s, i, p in hits[:limit]]


def _route(state: State) -> str:
    return "tool" if state["messages"][-1].tool_calls else END


async def _invoke(graph: Any, goal: str) -> tuple[float, float, bool]:
    started = time.time()
    config = {"configurable": {"thread_id": f"rif-{uuid.uuid4().hex}"}}
    try:
        out = await graph.ainvoke(
            {"messages": [HumanMessage(goal)], "goal": goal}, config, durability="sync"
        )
        last = out["messages"][-1]
        done = isinstance(last, AIMessage) and "[obs:tool-1]" in str(last.content)
    except Exception as exc:  # counted as lost, the others go on
        print(f"peer invocation failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        done = False
    return started, time.time(), done


async def main_async(n: int, base_url: str, database_url: str, pool_size: int) -> dict[str, Any]:
    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="bench", max_retries=0, timeout=120, http_client=http
    )
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(
        database_url, min_size=1, max_size=pool_size, kwargs=kwargs, open=False
    ) as pool:
        # The saver is annotated for a pool of plain connections; dict rows work the same.
        saver = AsyncPostgresSaver(cast(Any, pool))
        await saver.setup()
        agent = Agent(client, pool)
        graph = StateGraph(State)
        graph.add_node("model", agent.model)
        graph.add_node("tool", agent.tool)
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", _route)
        graph.add_edge("tool", "model")
        compiled = graph.compile(checkpointer=saver)
        goals = [f"peer {i}: what happens after retries are exhausted?" for i in range(n)]
        runs = await asyncio.gather(*(_invoke(compiled, g) for g in goals))
    await client.close()
    return {
        "wall_s": max(e for _, e, _ in runs) - min(s for s, _, _ in runs),
        "latencies_s": [e - s for s, e, ok in runs if ok],
        "lost": sum(1 for *_, ok in runs if not ok),
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--pool-size", type=int, default=20)
    args = parser.parse_args()
    url = args.database_url.replace("postgres://", "postgresql://", 1)
    result = asyncio.run(main_async(args.n, args.base_url, url, args.pool_size))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
