"""OpenTelemetry for runs (issue 12 item 4): the adapter behind ``runs.domain.telemetry``.

Off by default: ``from_settings()`` returns the domain's no-op port, creates no tracer provider
and installs nothing global, so the runner pays one method call per span. On
(``AGENTCONSOLE_OTEL=1``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` in the environment): an SDK tracer
provider, with a batching OTLP/HTTP exporter when an endpoint is configured (the ``otlp`` extra).
The standard ``OTEL_*`` variables (sampler, exporter headers, timeout) apply as usual.

The provider is built lazily, in the process that first asks for a runner: a Celery prefork
child builds its own after the fork (the batch processor's thread does not survive a fork).

What the spans carry is decided in ``runs.domain.telemetry`` (controlled summaries only). This
adapter adds one more guard: an exception leaving a span records its type, never its message (a
message may quote an argument).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanContext, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentconsole.ops import logs
from runs.domain.telemetry import NOOP_TELEMETRY, Attributes, Telemetry
from runs.domain.telemetry import Link as PortLink

log = logging.getLogger(__name__)

INSTRUMENTATION = "agentconsole.runs"
# Only the W3C trace context crosses to a tool: baggage could carry anything a caller put in it.
_PROPAGATOR = TraceContextTextMapPropagator()


class OtelSpan:
    __slots__ = ("_span",)

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, dict(attributes or {}))

    def fail(self, code: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, code))
        self._span.set_attribute("error.type", code)

    @property
    def link(self) -> SpanContext:
        return self._span.get_span_context()


class OtelTelemetry:
    enabled = True

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer(INSTRUMENTATION)

    @contextlib.contextmanager
    def span(
        self, name: str, attributes: Attributes | None = None, *, links: Sequence[PortLink] = ()
    ) -> Iterator[OtelSpan]:
        with self._tracer.start_as_current_span(
            name,
            attributes=dict(attributes or {}),
            links=[
                Link(context, dict(attrs))
                for context, attrs in links
                if isinstance(context, SpanContext)
            ],
            # The SDK would store str(exception) and its stack: both may quote arguments.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield OtelSpan(span)
            except BaseException as exc:
                kind = type(exc).__name__
                span.set_status(Status(StatusCode.ERROR, kind))
                span.set_attribute("error.type", kind)
                raise

    def trace_headers(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier

    def shutdown(self) -> None:
        self.provider.shutdown()


def otlp_exporter(endpoint: str) -> SpanExporter:
    try:
        # import here: the exporter is the optional ``otlp`` extra (protobuf, requests).
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ImproperlyConfigured(
            "OTLP export is configured but its exporter is not installed: "
            "pip install 'agentconsole[otlp]'"
        ) from exc
    return OTLPSpanExporter(endpoint=endpoint)


def build(
    *,
    service_name: str,
    endpoint: str = "",
    processors: Sequence[SpanProcessor] = (),
) -> OtelTelemetry:
    """A tracer provider of our own (the tests pass an in-memory exporter's processor)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    for processor in processors:
        provider.add_span_processor(processor)
    if endpoint:
        provider.add_span_processor(BatchSpanProcessor(otlp_exporter(endpoint)))
    return OtelTelemetry(provider)


@register()
def check_otlp_exporter(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """Export configured but its exporter missing: refuse to start, instead of failing the
    first run a worker advances (the provider is built lazily, in the worker)."""
    endpoint = getattr(settings, "AGENTCONSOLE_OTEL_ENDPOINT", "")
    if not (getattr(settings, "AGENTCONSOLE_OTEL", False) and endpoint):
        return []
    try:
        otlp_exporter(endpoint).shutdown()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="agentconsole.E020")]
    return []


@functools.cache
def from_settings() -> Telemetry:
    """The process's telemetry: the no-op port unless ``AGENTCONSOLE_OTEL`` is on."""
    if not getattr(settings, "AGENTCONSOLE_OTEL", False):
        return NOOP_TELEMETRY
    endpoint = getattr(settings, "AGENTCONSOLE_OTEL_ENDPOINT", "")
    telemetry = build(
        service_name=getattr(settings, "AGENTCONSOLE_OTEL_SERVICE_NAME", "agentconsole"),
        endpoint=endpoint,
    )
    if not endpoint:
        log.warning("AGENTCONSOLE_OTEL is on without an OTLP endpoint: spans are not exported")
    # Global too, so other instrumentation in the process (an HTTP client's) joins our traces.
    trace.set_tracer_provider(telemetry.provider)
    # Log records get the current span's ids (agentconsole.ops.logs; printed with LOG_FORMAT=json).
    logs.set_trace_ids_provider(log_trace_ids)
    return telemetry


def log_trace_ids() -> dict[str, str]:
    """The current span's ids for a log record (``{}`` outside a span or with tracing off)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
    }
