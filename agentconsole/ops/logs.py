"""Structured logs: the run a line belongs to, and hooks for trace ids.

``RunContextFilter`` stamps every record with ``run_id`` from a context variable that the
adapters set while they work on a run (``agentconsole.kernel.log_context.run_context``; the Celery
task that advances it), and with ``trace_id``/``span_id`` from the provider tracing installs
(``set_trace_ids_provider``). ``JsonFormatter`` writes one JSON object per line
(``LOG_FORMAT=json``). Nothing here reads a request body or arguments: a log line carries the
message the code wrote, already free of secrets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from agentconsole.kernel.log_context import current_run_id

# Returns {"trace_id": ..., "span_id": ...} for the current span, or {} (tracing off).
TraceIds = Callable[[], dict[str, str]]
_trace_ids: TraceIds | None = None


def set_trace_ids_provider(provider: TraceIds | None) -> None:
    """Tracing (OpenTelemetry) installs how to read the current span's ids; None removes it."""
    global _trace_ids  # one process-wide hook, set once at start-up
    _trace_ids = provider


class RunContextFilter(logging.Filter):
    """Adds ``run_id``, ``trace_id`` and ``span_id`` (None when unknown); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "run_id", None) is None:
            record.run_id = current_run_id.get()
        ids: dict[str, str] = {}
        if _trace_ids is not None:
            try:
                ids = _trace_ids()
            except Exception:  # a broken tracing hook must never lose the log line
                ids = {}
        record.trace_id = ids.get("trace_id")
        record.span_id = ids.get("span_id")
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, run and trace ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for key in ("run_id", "trace_id", "span_id"):
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)
