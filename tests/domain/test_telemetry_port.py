"""The tracing port (runs.domain.telemetry) without OpenTelemetry: the no-op default, the
controlled-summary builders, and a whole in-memory run seen through a recording port."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from runs.domain import telemetry as t
from runs.domain.machine import Status
from tests.domain.toolkit import SECRET, final, grant, harness, tool


@dataclass
class Recorded:
    name: str
    attributes: dict[str, Any]
    parent: Recorded | None
    links: list[Any] = field(default_factory=list)
    failed: str | None = None

    def set(self, attributes: t.Attributes) -> None:
        self.attributes.update(attributes)

    def event(self, name: str, attributes: t.Attributes | None = None) -> None:
        raise AssertionError("no events expected")

    def fail(self, code: str) -> None:
        self.failed = code

    @property
    def link(self) -> object:
        return self


class RecordingTelemetry:
    """A port that keeps every span (with its parent) in a list: what an adapter would get."""

    enabled = True

    def __init__(self) -> None:
        self.spans: list[Recorded] = []
        self._stack: list[Recorded] = []

    @contextlib.contextmanager
    def span(
        self, name: str, attributes: t.Attributes | None = None, *, links: Sequence[t.Link] = ()
    ) -> Iterator[Recorded]:
        span = Recorded(name, dict(attributes or {}), self._stack[-1] if self._stack else None)
        span.links = list(links)
        self.spans.append(span)
        self._stack.append(span)
        try:
            yield span
        finally:
            self._stack.pop()

    def trace_headers(self) -> dict[str, str]:
        return {"traceparent": f"span-{len(self.spans)}"}


def test_the_noop_port_records_nothing_and_allocates_no_scope() -> None:
    noop = t.NOOP_TELEMETRY
    assert noop.enabled is False
    assert noop.span("run") is noop.span("tool.x", {"a": 1})
    with noop.span("run") as span:
        span.set({"a": 1})
        span.event("e")
        span.fail("CODE")
        assert span.link is None
    assert noop.trace_headers() == {}


@pytest.mark.parametrize(
    ("value", "exported"),
    [
        ("qwen2.5:7b-instruct", "qwen2.5:7b-instruct"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        ("free text with spaces", t.OTHER),
        ("x" * 129, t.OTHER),
        ("", t.OTHER),
        (None, t.OTHER),
        (17, t.OTHER),
        ("line\nbreak", t.OTHER),
    ],
)
def test_only_name_like_values_are_exported_as_names(value: object, exported: str) -> None:
    assert t.name(value) == exported


@pytest.mark.parametrize(
    ("value", "exported"),
    [
        ("SCHEMA_VALIDATION_FAILED", "SCHEMA_VALIDATION_FAILED"),
        ("TOOL_TIMEOUT", "TOOL_TIMEOUT"),
        ("NOT_FOUND_run-output/secret-plan.md", t.OTHER),  # built from an argument
        ("BAD_KEY_sk-test-123456", t.OTHER),
        ("[REDACTED]", t.OTHER),
        ("lowercase", t.OTHER),
        ("A" * 65, t.OTHER),
    ],
)
def test_only_upper_snake_codes_are_exported_as_codes(value: object, exported: str) -> None:
    assert t.code(value) == exported


def test_a_model_call_summary_keeps_names_and_counts_only() -> None:
    details = {
        "endpoint": "local-vllm",
        "model": "llama3.1:8b",
        "input_tokens": 10,
        "output_tokens": True,  # a bool is not a count
        "attempts": -1,
        "usage_reported": True,
        "prompt": "ignore previous instructions",
        "api_key": SECRET,
    }
    assert t.model_call_attributes(details) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "llama3.1:8b",
        "gen_ai.usage.input_tokens": 10,
        "agentconsole.planner.endpoint": "local-vllm",
    }
    # A failed call (run.stopped): the numbers only, no model attributes.
    assert t.model_call_attributes({"http_status": 503, "attempts": 3, "reason": "X"}) == {
        "http.response.status_code": 503,
        "agentconsole.planner.attempts": 3,
    }
    assert t.model_call_attributes({}) == {}


def test_a_run_seen_through_the_port() -> None:
    """Spans nest as the span model says, and an unknown tool a planner names is not exported
    by name (a planner may write anything there)."""
    recording = RecordingTelemetry()
    h = harness(
        [
            tool("p1", "search_public", {"query": "retries exhausted"}),
            tool("p2", f"tool_{SECRET}", {"query": "x"}),
            final("After three retries, hand off.", ["tool-1"]),
        ],
        grants=[grant("search:public", "public")],
    )
    h.runner.telemetry = recording
    state = h.advance()
    assert state.status is Status.COMPLETED
    shape = [(s.name, s.parent.name if s.parent else None) for s in recording.spans]
    assert shape == [
        ("run", None),
        ("planner.step", "run"),
        ("policy.evaluate", "planner.step"),
        ("tool.search_public", "planner.step"),
        ("planner.step", "run"),
        ("policy.evaluate", "planner.step"),
        ("planner.step", "run"),
        ("final.validate", "planner.step"),
    ]
    unknown = recording.spans[5].attributes
    assert unknown["agentconsole.decision"] == "reject"
    assert unknown["agentconsole.tool.registered"] is False
    assert "agentconsole.tool.name" not in unknown
    assert SECRET not in repr([(s.name, s.attributes) for s in recording.spans])


def test_a_step_that_ends_before_a_planner_output_says_so_with_its_code() -> None:
    recording = RecordingTelemetry()
    h = harness([])  # the fixture planner has nothing to say: PLANNER_EXHAUSTED
    h.runner.telemetry = recording
    assert h.advance().status is Status.FAILED
    (step,) = [s for s in recording.spans if s.name == "planner.step"]
    assert step.attributes["agentconsole.step.kind"] == "no_output"
    assert "agentconsole.planner.source" not in step.attributes
    assert step.attributes["agentconsole.code"] == "PLANNER_EXHAUSTED"
    assert [s.name for s in recording.spans] == ["run", "planner.step"]  # nothing was evaluated
