"""OpenTelemetry spans of real runs (issue 12 item 4), read from the SDK's in-memory exporter.

Runs go through the services and the wiring (ORM store, thread executor, fixture planner) with
the plugin tools of tests.plugins.traced_tools; only the telemetry is swapped for one whose
provider exports to memory. The checks: the span tree, the W3C trace context a tool receives,
that no canary (a server secret, argument values) reaches a span, and that off means off.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentconsole import wiring
from agentconsole.ops import logs, telemetry
from policy import models as policy_models
from runs import models as run_models
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.machine import Status
from runs.domain.state import RunState
from runs.domain.telemetry import NOOP_TELEMETRY
from tests.durable.durable_kit import plan_and_record_intent
from tests.plugins import traced_tools
from tests.support.planner import tool_call
from tests.support.runs import use_run_output_root
from tests.support.workers import worker_database_url

pytestmark = pytest.mark.django_db

SECRET_CANARY = "canary-secret-9f41c2e7"
ARG_CANARY = "canary-query-5d03"
NOTE_CANARY = "canary-note-b71e"
BOGUS_CANARY = "canary-bogus-44aa"
FLAKY_CANARY = "canary-flaky-0c9d"
CANARIES = (SECRET_CANARY, ARG_CANARY, NOTE_CANARY, BOGUS_CANARY, FLAKY_CANARY)
# The cached original: a test's monkeypatch may still be in place when the fixture tears down.
CACHED_FROM_SETTINGS = telemetry.from_settings
GRANT = {"capability": traced_tools.CAPABILITY, "resource_scope": "*", "expires_at_step": 100}

# The one run every tree test uses: a read, a write that waits for a person, a rejected
# proposal (an unknown field, carrying a secret), a retried read, a final answer.
OUTPUTS = [
    tool_call("p1", "traced_lookup", {"query": ARG_CANARY}),
    tool_call("p2", "traced_note", {"text": NOTE_CANARY}),
    tool_call("p3", "traced_lookup", {"query": "x", "bogus": f"{BOGUS_CANARY} {SECRET_CANARY}"}),
    tool_call("p4", "traced_flaky", {"text": FLAKY_CANARY}),
    {"kind": "final", "answer": "Done.", "citation_observation_ids": ["tool-1"]},
]


@pytest.fixture(autouse=True)
def plugin_tools(settings: Any, tmp_path: Path) -> Iterator[None]:
    use_run_output_root(settings, tmp_path / "run-output")
    settings.AGENTCONSOLE_TOOLS = ["tests.plugins.traced_tools"]
    settings.AGENTCONSOLE_TOOL_SECRETS = {"traced_lookup": {"API_KEY": SECRET_CANARY}}
    wiring.registry.cache_clear()
    CACHED_FROM_SETTINGS.cache_clear()
    traced_tools.reset()
    yield
    wiring.registry.cache_clear()
    CACHED_FROM_SETTINGS.cache_clear()
    logs.set_trace_ids_provider(None)  # a test that turned tracing on installed it
    traced_tools.reset()


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Telemetry on, exporting to memory: what the wiring hands the runner and the executor."""
    memory = InMemorySpanExporter()
    on = telemetry.build(service_name="agentconsole-test", processors=[SimpleSpanProcessor(memory)])
    monkeypatch.setattr(telemetry, "from_settings", lambda: on)
    yield memory
    on.shutdown()


def create(outputs: list[Any] = OUTPUTS) -> RunState:
    return services.run_create(
        subject="alice",
        goal="Look it up, note it, answer.",
        budgets=RunBudgets(
            max_steps=10, max_tool_calls=6, max_repeated_proposal=2, deadline_ms=600_000
        ),
        grants=[GRANT],
        planner={"kind": "fixture", "outputs": outputs},
    )


def approve(state: RunState) -> None:
    assert state.pending_confirmation_id is not None
    row = policy_models.Confirmation.objects.get(pk=state.pending_confirmation_id)
    services.confirmation_decide(
        confirmation_id=row.pk, approved=True, shown_hash=row.proposal_hash
    )


def whole_run() -> tuple[RunState, RunState]:
    """The run of OUTPUTS: one advance up to the confirmation, one after it."""
    run = create()
    waiting = services.run_advance(run_id=run.run_id)
    assert waiting is not None
    assert waiting.status is Status.WAITING_CONFIRMATION
    approve(waiting)
    done = services.run_advance(run_id=run.run_id)
    assert done is not None
    assert done.status is Status.COMPLETED, done.stop_reason
    return waiting, done


def tree(spans: tuple[ReadableSpan, ...], root: ReadableSpan) -> list[Any]:
    """``[name, [children...]]`` from ``root`` down, children in start order."""
    children = sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == _sid(root)),
        key=lambda s: s.start_time or 0,
    )
    return [root.name, [tree(spans, c) for c in children]]


def _sid(span: ReadableSpan) -> int:
    context = span.context
    assert context is not None
    return context.span_id


def _tid(span: ReadableSpan) -> int:
    context = span.context
    assert context is not None
    return context.trace_id


def roots(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.parent is None), key=lambda s: s.start_time or 0)


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# --- the span tree ----------------------------------------------------------------------------


def test_the_span_tree_of_a_run_across_a_confirmation(exporter: InMemorySpanExporter) -> None:
    _, done = whole_run()
    spans = exporter.get_finished_spans()
    first, second = roots(spans)
    assert tree(spans, first) == [
        "run",
        [
            ["planner.step", [["policy.evaluate", []], ["tool.traced_lookup", []]]],
            ["planner.step", [["policy.evaluate", []]]],
        ],
    ]
    assert tree(spans, second) == [
        "run",
        [
            ["planner.step", [["policy.evaluate", []], ["tool.traced_note", []]]],
            ["planner.step", [["policy.evaluate", []]]],
            [
                "planner.step",
                [["policy.evaluate", []], ["tool.traced_flaky", []], ["tool.traced_flaky", []]],
            ],
            ["planner.step", [["final.validate", []]]],
        ],
    ]
    # Each advance is its own trace, with a fresh random id: the run id is an attribute.
    assert _tid(first) != _tid(second)
    assert {attrs(first)["agentconsole.run_id"], attrs(second)["agentconsole.run_id"]} == {
        done.run_id
    }
    for root in (first, second):
        assert format(_tid(root), "032x") not in done.run_id
    assert attrs(first)["agentconsole.run.status"] == "waiting_confirmation"
    assert attrs(first)["agentconsole.run.stop_reason"] == "USER_CONFIRMATION_REQUIRED"
    assert (attrs(second)["agentconsole.run.status"], attrs(second)["agentconsole.run.step"]) == (
        "completed",
        5,
    )


def test_each_span_says_what_was_decided_in_codes(exporter: InMemorySpanExporter) -> None:
    whole_run()
    spans = exporter.get_finished_spans()
    steps = [attrs(s) for s in named(spans, "planner.step")]
    assert [(s["agentconsole.step"], s["agentconsole.step.kind"]) for s in steps] == [
        (1, "plan"),
        (2, "plan"),
        (2, "resume"),
        (3, "plan"),
        (4, "plan"),
        (5, "plan"),
    ]
    assert {s.get("agentconsole.planner.source") for s in steps} == {"fixture", None}
    evaluations = [attrs(s) for s in named(spans, "policy.evaluate")]
    assert [e["agentconsole.decision"] for e in evaluations] == [
        "execute",
        "needs_confirmation",
        "execute",
        "reject",
        "execute",
    ]
    assert evaluations[1]["agentconsole.code"] == "USER_CONFIRMATION_REQUIRED"
    rejected = evaluations[3]
    assert (rejected["agentconsole.gate.layer"], rejected["agentconsole.code"]) == (
        "schema",
        "UNKNOWN_INPUT_FIELD",
    )
    assert rejected["agentconsole.tool.name"] == "traced_lookup"
    assert evaluations[0]["agentconsole.tool.side_effect"] == "read"
    (final,) = named(spans, "final.validate")
    assert attrs(final)["agentconsole.decision"] == "final"
    assert attrs(final)["agentconsole.final.citations"] == 1
    (lookup,) = named(spans, "tool.traced_lookup")
    assert {
        k: v for k, v in attrs(lookup).items() if k not in ("agentconsole.tool.duration_ms",)
    } == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "traced_lookup",
        "agentconsole.tool.name": "traced_lookup",
        "agentconsole.tool.version": "1",
        "agentconsole.tool.side_effect": "read",
        "agentconsole.tool.attempt": 1,
        "agentconsole.tool.outcome": "succeeded",
        "agentconsole.tool.retryable": False,
        "agentconsole.tool.reconciled": False,
    }


def test_a_retry_attempt_is_its_own_span_linked_to_the_attempt_it_repeats(
    exporter: InMemorySpanExporter,
) -> None:
    whole_run()
    spans = exporter.get_finished_spans()
    first, second = named(spans, "tool.traced_flaky")
    assert (
        attrs(first)["agentconsole.tool.attempt"],
        attrs(second)["agentconsole.tool.attempt"],
    ) == (1, 2)
    assert attrs(first)["agentconsole.code"] == "UPSTREAM_BUSY"
    assert first.status.status_code is trace.StatusCode.ERROR
    assert first.status.description == "UPSTREAM_BUSY"
    assert attrs(second)["agentconsole.tool.outcome"] == "succeeded"
    assert attrs(second)["agentconsole.tool.backoff_ms"] == 1
    (link,) = second.links
    assert (link.context.trace_id, link.context.span_id) == (_tid(first), _sid(first))
    assert dict(link.attributes or {}) == {"agentconsole.link": "previous-attempt"}
    # Both attempts belong to the same step of the same run span.
    assert first.parent == second.parent
    assert first.parent is not None


def test_a_tool_receives_the_traceparent_of_its_own_span(exporter: InMemorySpanExporter) -> None:
    whole_run()
    spans = exporter.get_finished_spans()
    seen = dict(traced_tools.SEEN[:1])
    (lookup_span,) = named(spans, "tool.traced_lookup")
    header = seen["traced_lookup"]["traceparent"]
    version, trace_id, span_id, flags = header.split("-")
    assert version == "00"
    assert int(flags, 16) & 0x01  # sampled
    assert int(trace_id, 16) == _tid(lookup_span) == _tid(roots(spans)[0])
    assert int(span_id, 16) == _sid(lookup_span)
    # Each attempt of the retried tool sees its own attempt's span.
    flaky_headers = [h["traceparent"] for name, h in traced_tools.SEEN if name == "traced_flaky"]
    assert [int(h.split("-")[2], 16) for h in flaky_headers] == [
        _sid(s) for s in named(spans, "tool.traced_flaky")
    ]
    # Only the trace context crosses to a tool (no baggage).
    assert set(seen["traced_lookup"]) == {"traceparent"}


def test_no_canary_reaches_a_span(exporter: InMemorySpanExporter) -> None:
    """A server secret the tool echoes, argument values (also of a rejected proposal, and one a
    tool quotes in a failure message): none is in a span's name, attributes, events, links or
    status."""
    whole_run()
    spans = exporter.get_finished_spans()
    assert len(spans) == 18
    exported = json.dumps([json.loads(s.to_json()) for s in spans])
    for canary in CANARIES:
        assert canary not in exported
    assert "Bearer" not in exported
    # The canaries did reach the tools (the check above would pass on a run that never ran).
    assert any(h for _, h in traced_tools.SEEN)


def test_a_model_planners_call_lights_up_the_genai_attributes(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model planner's call summary (``PlannerReply.details``, built by the same
    ``trace_summary`` as the OpenAI-compatible planner) becomes GenAI attributes; a model name
    that is not a name is exported as OTHER."""
    from runs.domain.gateway import model_planning as mp
    from runs.domain.planning import FixturePlanner, PlannerReply

    class ModelLikePlanner(FixturePlanner):
        source = mp.SOURCE

        def next(self, state: RunState, context: Any) -> PlannerReply:
            weird = state.planner_cursor == 1  # the second call's endpoint says something odd
            return PlannerReply(
                output=super().next(state, context),
                tokens=849,
                details=mp.trace_summary(
                    endpoint="local-vllm",
                    model=f"model says {SECRET_CANARY}" if weird else "qwen2.5:7b-instruct",
                    usage=mp.Usage(input_tokens=812, output_tokens=37, reported=True),
                    attempts=2,
                ),
            )

    monkeypatch.setattr(
        wiring, "planner_for", lambda config, **_: ModelLikePlanner(list(config["outputs"]))
    )
    run = create([OUTPUTS[0], OUTPUTS[-1]])
    services.run_advance(run_id=run.run_id)
    steps = [attrs(s) for s in named(exporter.get_finished_spans(), "planner.step")]
    call = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "qwen2.5:7b-instruct",
        "gen_ai.usage.input_tokens": 812,
        "gen_ai.usage.output_tokens": 37,
        "agentconsole.planner.endpoint": "local-vllm",
        "agentconsole.planner.attempts": 2,
    }
    model_keys = set(call)
    assert [{k: v for k, v in s.items() if k in model_keys} for s in steps] == [
        call,
        {**call, "gen_ai.request.model": "OTHER"},
    ]
    assert {s["agentconsole.planner.source"] for s in steps} == {"model"}


# --- off, on, export --------------------------------------------------------------------------


def test_off_by_default_no_provider_no_spans_no_headers() -> None:
    assert telemetry.from_settings() is NOOP_TELEMETRY
    run = create([OUTPUTS[0], OUTPUTS[-1]])
    done = services.run_advance(run_id=run.run_id)
    assert done is not None
    assert done.status is Status.COMPLETED
    # Nothing installed: the global provider is still the API's proxy, no SDK provider exists.
    assert not isinstance(trace.get_tracer_provider(), SdkTracerProvider)
    assert traced_tools.SEEN == [("traced_lookup", {})]
    assert telemetry.log_trace_ids() == {}


def test_on_from_settings_builds_one_provider_and_installs_it(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed: list[Any] = []
    # The global provider can be set once per process: record the call instead.
    monkeypatch.setattr(telemetry.trace, "set_tracer_provider", installed.append)
    settings.AGENTCONSOLE_OTEL = True
    settings.AGENTCONSOLE_OTEL_ENDPOINT = ""
    on = telemetry.from_settings()
    assert on.enabled
    assert telemetry.from_settings() is on
    assert isinstance(on, telemetry.OtelTelemetry)
    assert installed == [on.provider]
    on.shutdown()


class _Collector(BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP collector: keeps the request bodies it receives."""

    bodies: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        type(self).bodies.append((self.path, self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    _Collector.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_otlp_export_sends_the_spans_to_the_endpoint(
    collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    on = telemetry.build(service_name="agentconsole-test", endpoint=collector)
    monkeypatch.setattr(telemetry, "from_settings", lambda: on)
    run = create([OUTPUTS[0], OUTPUTS[-1]])
    services.run_advance(run_id=run.run_id)
    assert on.provider.force_flush(10_000)
    on.shutdown()
    assert {path for path, _ in _Collector.bodies} == {"/v1/traces"}
    names = set()
    for _, body in _Collector.bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}[
                "service.name"
            ]
            assert service == "agentconsole-test"
            for scope in resource_spans.scope_spans:
                names |= {s.name for s in scope.spans}
        for canary in CANARIES:
            assert canary.encode() not in body
    assert names == {
        "run",
        "planner.step",
        "policy.evaluate",
        "tool.traced_lookup",
        "final.validate",
    }


def test_log_records_carry_the_current_trace_and_span_ids(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry.trace, "set_tracer_provider", lambda provider: None)
    settings.AGENTCONSOLE_OTEL = True
    settings.AGENTCONSOLE_OTEL_ENDPOINT = ""
    on = telemetry.from_settings()
    try:
        record = logging.LogRecord("t", logging.INFO, __file__, 1, "hello", None, None)
        with on.span("run") as span:
            logs.RunContextFilter().filter(record)
            context = span.link
        assert record.trace_id == format(context.trace_id, "032x")  # type: ignore[attr-defined]
        assert record.span_id == format(context.span_id, "016x")  # type: ignore[attr-defined]
        outside = logging.LogRecord("t", logging.INFO, __file__, 1, "hello", None, None)
        logs.RunContextFilter().filter(outside)
        assert (outside.trace_id, outside.span_id) == (None, None)  # type: ignore[attr-defined]
    finally:
        logs.set_trace_ids_provider(None)
        on.shutdown()


def test_an_exception_leaving_a_span_records_its_type_never_its_message(
    exporter: InMemorySpanExporter,
) -> None:
    on = telemetry.from_settings()
    with pytest.raises(ValueError, match="canary"), on.span("run"):
        raise ValueError(f"bad argument {ARG_CANARY}")
    (span,) = exporter.get_finished_spans()
    assert span.status.description == "ValueError"
    assert attrs(span) == {"error.type": "ValueError"}
    assert span.events == ()


def test_a_command_a_dead_worker_left_is_settled_in_a_recovery_span(
    exporter: InMemorySpanExporter,
) -> None:
    run = create([OUTPUTS[0], OUTPUTS[-1]])
    plan_and_record_intent(run.run_id)  # the worker died after the intent, before the tool
    done = services.run_advance(run_id=run.run_id)
    assert done is not None
    assert done.status is Status.COMPLETED
    spans = exporter.get_finished_spans()
    (root,) = roots(spans)
    assert tree(spans, root) == [
        "run",
        [["tool.traced_lookup", []], ["planner.step", [["final.validate", []]]]],
    ]
    (recovered,) = named(spans, "tool.traced_lookup")
    assert attrs(recovered)["agentconsole.tool.recovery"] == "re-executed"
    assert attrs(recovered)["agentconsole.tool.attempt"] == 1
    # The re-executed tool, too, was handed its span's trace context.
    [(_, headers)] = [s for s in traced_tools.SEEN if s[0] == "traced_lookup"]
    assert int(headers["traceparent"].split("-")[2], 16) == _sid(recovered)


@pytest.mark.django_db(transaction=True)
def test_an_isolated_tool_gets_the_trace_context_in_its_child_process(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child process reads the test database and the plugin tools from its environment.
    monkeypatch.setenv("DATABASE_URL", worker_database_url())
    monkeypatch.setenv("AGENTCONSOLE_TOOLS", "tests.plugins.traced_tools")
    run = create([tool_call("p1", "traced_isolated", {"text": "x"}), OUTPUTS[-1]])
    done = services.run_advance(run_id=run.run_id)
    assert done is not None
    assert done.status is Status.COMPLETED, done.stop_reason
    (span,) = named(exporter.get_finished_spans(), "tool.traced_isolated")
    observation = run_models.Observation.objects.get(run_id=run.run_id, observation_id="tool-1")
    header = observation.content["value"]["traceparent"]
    assert header == f"00-{_tid(span):032x}-{_sid(span):016x}-{header[-2:]}"


def test_export_configured_without_its_exporter_stops_the_start(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.AGENTCONSOLE_OTEL = True
    settings.AGENTCONSOLE_OTEL_ENDPOINT = "http://127.0.0.1:4318/v1/traces"
    assert telemetry.check_otlp_exporter() == []
    # As if the ``otlp`` extra were not installed: the exporter's module cannot be imported.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    (error,) = telemetry.check_otlp_exporter()
    assert error.id == "agentconsole.E020"
    assert "agentconsole[otlp]" in error.msg
    settings.AGENTCONSOLE_OTEL = False
    assert telemetry.check_otlp_exporter() == []
