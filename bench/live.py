"""Benchmarks on the live stack: a real ASGI server (daphne), real Celery worker processes,
websocket clients, and the runs list over 100,000 rows.

- ``bench_trace_latency``: commit of a trace event → its arrival at 100 websocket clients.
- ``bench_approval_roundtrip``: the operator's approve request → the resumed run's next trace
  event on a websocket, with a real worker.
- ``bench_runs_list``: server time of ``/api/runs/`` (first page, filtered page), 100,000 runs.
- ``bench_worker_scaling``: persisted steps/s with 1 and 2 worker processes over 200 runs.

Every process started here is stopped in a ``finally`` (its process group killed on timeout);
Redis keys naming our queues are deleted. Without ``REDIS_URL`` the in-memory channel layer and
kombu's filesystem broker (in a private temporary folder) are used, and each "how" says so.

The websocket clients of the trace benchmark run in a child process of their own
(``python -m bench.support.ws_clients``), so their receive clock is not delayed by the runner
threads of this process competing for the GIL.
"""

from __future__ import annotations

from bench.approval import bench_approval_roundtrip
from bench.runs_list import bench_runs_list
from bench.trace_latency import bench_trace_latency
from bench.worker_scaling import bench_worker_scaling

__all__ = [
    "bench_approval_roundtrip",
    "bench_runs_list",
    "bench_trace_latency",
    "bench_worker_scaling",
]
