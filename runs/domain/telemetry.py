"""The tracing port (issue 12 item 4): what the runner tells a tracing system, as a small protocol.

The domain core does not import OpenTelemetry: the runner talks to ``Telemetry`` and the Django
side plugs in the OpenTelemetry adapter (``agentconsole.ops.telemetry``). The default is
``NOOP_TELEMETRY``: every call returns at once and nothing is allocated per span, so a deployment
without tracing pays one method call per span.

Span model (one worker slice = one ``advance``):

    run                      one per advance (a run advances in several slices: waiting for a
    │                        person, resume, fairness slices, crash recovery); a fresh trace id
    │                        each time, never derived from the run id; ``agentconsole.run_id``
    │                        ties the slices of one run together
    ├── planner.step         one per step the runner decides (plan, or resume a confirmed
    │   │                    proposal); planner source, step number, GenAI usage if reported
    │   ├── policy.evaluate  the gate's decision: kind, layer, stable code
    │   │   (or final.validate for a final answer)
    │   ├── tool.<name>      one per attempt; attempt n > 1 links to attempt n - 1
    │   └── tool.<name>
    └── tool.<name>          a command a dead worker left started, settled on recovery

Attributes are controlled summaries only, built here from trusted facts (the registry, the
gate's codes, counts, durations): never argument values, outputs, goals, answers or secrets.
A value that is not a plain code is replaced by ``OTHER`` rather than exported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any, Protocol

from policy.domain.contracts import ToolContract
from policy.domain.outcomes import OutcomeStatus, ToolOutcome, Verification
from policy.domain.registry import ToolRegistry
from runs.domain import trace as ev
from runs.domain.state import RunState
from runs.domain.step.commits import Commit

AttributeValue = str | bool | int | float
Attributes = Mapping[str, AttributeValue]

# A link to another span: the handle that span's ``link`` gave, and the link's attributes.
Link = tuple[object, Attributes]


class Span(Protocol):
    def set(self, attributes: Attributes) -> None: ...

    def event(self, name: str, attributes: Attributes | None = None) -> None: ...

    def fail(self, code: str) -> None:
        """Mark the span as an error with a stable code (never an exception's message)."""
        ...

    @property
    def link(self) -> object | None:
        """An opaque handle another span may link to (None when nothing is recorded)."""
        ...


class Telemetry(Protocol):
    @property
    def enabled(self) -> bool: ...

    def span(
        self, name: str, attributes: Attributes | None = None, *, links: Sequence[Link] = ()
    ) -> AbstractContextManager[Span]:
        """A child of the current span, current while the block runs."""
        ...

    def trace_headers(self) -> dict[str, str]:
        """The W3C trace context (``traceparent``) of the current span, for a tool or an HTTP
        server to continue the trace; empty when nothing is recorded."""
        ...


class _NoopSpan:
    link = None

    def set(self, attributes: Attributes) -> None:
        pass

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        pass

    def fail(self, code: str) -> None:
        pass


class _NoopScope:
    """One shared, reentrant context manager: off costs no allocation per span."""

    def __enter__(self) -> _NoopSpan:
        return NOOP_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


NOOP_SPAN = _NoopSpan()
_NOOP_SCOPE = _NoopScope()


class NoopTelemetry:
    enabled = False

    def span(
        self, name: str, attributes: Attributes | None = None, *, links: Sequence[Link] = ()
    ) -> AbstractContextManager[Span]:
        return _NOOP_SCOPE

    def trace_headers(self) -> dict[str, str]:
        return {}


NOOP_TELEMETRY: Telemetry = NoopTelemetry()


# --- Controlled summaries ---------------------------------------------------------------------

OTHER = "OTHER"
_NAME = re.compile(r"[A-Za-z0-9_.:/@+-]{1,128}")
# Stable codes are UPPER_SNAKE (SCHEMA_VALIDATION_FAILED, TOOL_TIMEOUT): a tool that builds its
# code from an argument ("NOT_FOUND_" + a path) gets OTHER, whatever the argument looks like.
_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def name(value: object) -> str:
    """A name the program chose (a registered tool, a model, a layer) as an attribute value;
    anything else (free text, a long value) becomes ``OTHER``."""
    return value if isinstance(value, str) and _NAME.fullmatch(value) else OTHER


def code(value: object) -> str:
    """A stable code as an attribute value, else ``OTHER``: a tool or planner that puts content
    in a code field does not export it."""
    return value if isinstance(value, str) and _CODE.fullmatch(value) else OTHER


def run_attributes(state: RunState) -> dict[str, AttributeValue]:
    return {
        "agentconsole.run_id": name(state.run_id),
        "agentconsole.run.status": state.status.value,
        "agentconsole.run.step": state.step,
        "agentconsole.run.tool_calls": state.tool_calls,
        **({"agentconsole.run.stop_reason": code(state.stop_reason)} if state.stop_reason else {}),
    }


def tool_attributes(
    tool: str, version: str, side_effect: str, attempt: int
) -> dict[str, AttributeValue]:
    """A registered tool (the runner only executes commands the gate built from the registry)."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name(tool),
        "agentconsole.tool.name": name(tool),
        "agentconsole.tool.version": name(version),
        "agentconsole.tool.side_effect": name(side_effect),
        "agentconsole.tool.attempt": attempt,
    }


class ExecutionFacts(Protocol):
    """What the executor reports of one attempt (``runs.domain.runner.Execution``)."""

    @property
    def outcome(self) -> ToolOutcome: ...

    @property
    def verification(self) -> Verification | None: ...

    @property
    def output_violation(self) -> str | None: ...

    @property
    def reconciled(self) -> bool: ...

    @property
    def duration_ms(self) -> int: ...


def execution_attributes(execution: ExecutionFacts) -> dict[str, AttributeValue]:
    """Status, stable code, duration: never the outcome's value or message (tool output)."""
    outcome = execution.outcome
    attrs: dict[str, AttributeValue] = {
        "agentconsole.tool.outcome": outcome.status.value,
        "agentconsole.tool.retryable": outcome.retryable,
        "agentconsole.tool.duration_ms": execution.duration_ms,
        "agentconsole.tool.reconciled": execution.reconciled,
    }
    if outcome.code:
        attrs["agentconsole.code"] = code(outcome.code)
    if execution.output_violation:
        attrs["agentconsole.tool.output_violation"] = code(execution.output_violation)
    if execution.verification is not None:
        attrs["agentconsole.tool.verified"] = execution.verification.ok
    return attrs


# The trace event that says what a step decided, and the decision kind it stands for.
_DECISIONS = (
    (ev.TOOL_STARTED, "execute"),
    (ev.PROPOSAL_WAITING_CONFIRMATION, "needs_confirmation"),
    (ev.PROPOSAL_LOOP_DETECTED, "loop"),
    (ev.FINAL_VALIDATED, "final"),
    (ev.FINAL_REJECTED, "final_rejected"),
    (ev.PROPOSAL_REJECTED, "reject"),
    (ev.RUN_STOPPED, "stop"),
)


def decision_attributes(commit: Commit, registry: ToolRegistry) -> dict[str, AttributeValue]:
    """What the step decided, read from the commit's trace events (already controlled
    summaries) through a fixed list of keys: kind, gate layer, stable code, the tool when it is
    a registered one (a planner may name any tool: an unknown name is not exported)."""
    by_event: dict[str, dict[str, Any]] = {}
    for draft in commit.events:
        by_event.setdefault(draft.event, draft.details)
    attrs: dict[str, AttributeValue] = {}
    for event, kind in _DECISIONS:
        if event in by_event:
            attrs["agentconsole.decision"] = kind
            break
    rejected = by_event.get(ev.PROPOSAL_REJECTED)
    if rejected is not None:
        attrs["agentconsole.gate.layer"] = name(rejected.get("layer"))
    for event, key in (
        (ev.PROPOSAL_REJECTED, "code"),
        (ev.FINAL_REJECTED, "code"),
        (ev.PROPOSAL_WAITING_CONFIRMATION, "code"),
        (ev.RUN_STOPPED, "reason"),
    ):
        if event in by_event and by_event[event].get(key):
            attrs["agentconsole.code"] = code(by_event[event][key])
            break
    received = by_event.get(ev.PROPOSAL_RECEIVED) or by_event.get(ev.TOOL_STARTED)
    if received is not None:
        tool, version = received.get("tool"), received.get("version")
        registered = (
            isinstance(tool, str) and isinstance(version, str) and registry.get(tool, version)
        )
        attrs["agentconsole.tool.registered"] = bool(registered)
        if registered:
            attrs["agentconsole.tool.name"] = name(tool)
            attrs["agentconsole.tool.version"] = name(version)
            attrs["agentconsole.tool.side_effect"] = registered.contract.side_effect.value
        cited = received.get("source_observation_ids")
        if isinstance(cited, list):
            attrs["agentconsole.proposal.cited_observations"] = len(cited)
            attrs["agentconsole.proposal.cites_untrusted"] = bool(received.get("cites_untrusted"))
    final = by_event.get(ev.FINAL_VALIDATED) or by_event.get(ev.FINAL_REJECTED)
    if final is not None and isinstance(final.get("citations"), list):
        attrs["agentconsole.final.citations"] = len(final["citations"])
    passed = [
        layer
        for event, layer in (
            (ev.PROPOSAL_SCHEMA_VALIDATED, "schema"),
            (ev.POLICY_CAPABILITY_CHECKED, "authorization"),
            (ev.POLICY_CONFIRMATION_CHECKED, "confirmation"),
        )
        if event in by_event
    ]
    if passed:
        attrs["agentconsole.gate.checked"] = ",".join(passed)
    return attrs


def step_attributes(commit: Commit, *, resuming: bool) -> dict[str, AttributeValue]:
    """The planner.step span's own summary: which step, planned or resumed, by which source."""
    planned = next((d.details for d in commit.events if d.event == ev.PLANNER_OUTPUT), None)
    attrs: dict[str, AttributeValue] = {
        "agentconsole.step": commit.state.step,
        "agentconsole.step.kind": "plan" if planned else "resume" if resuming else "no_output",
    }
    stopped = next((d.details for d in commit.events if d.event == ev.RUN_STOPPED), None)
    if planned is None and stopped is not None:
        # No planner output, so no evaluation span: the step says why it ended (and, for a
        # failed model call, how many attempts and the endpoint's last HTTP status).
        attrs["agentconsole.code"] = code(stopped.get("reason"))
        attrs.update(model_call_attributes(stopped))
    if planned is not None:
        attrs["agentconsole.planner.source"] = name(planned.get("source"))
        attrs["agentconsole.planner.output_kind"] = name(planned.get("kind"))
        items = planned.get("context_items")
        if isinstance(items, int):
            attrs["agentconsole.planner.context_items"] = items
        attrs.update(model_call_attributes(planned))
    return attrs


# The model planner's call summary (``PlannerReply.details``, recorded in ``planner.output``; the
# numbers of a failed call in ``run.stopped``), as GenAI semantic-convention attributes.
_CALL_COUNTS = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "attempts": "agentconsole.planner.attempts",
    "http_status": "http.response.status_code",
}


def model_call_attributes(details: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """GenAI attributes of a model planner's call, from its trace summary: names and counts."""
    attrs: dict[str, AttributeValue] = {}
    model = details.get("model")
    if isinstance(model, str) and model:
        attrs["gen_ai.operation.name"] = "chat"
        # The model planner speaks the OpenAI chat-completions API, hosted or a local server.
        attrs["gen_ai.provider.name"] = attrs["gen_ai.system"] = "openai"
        # The model that answered (the configured one when the endpoint does not say).
        attrs["gen_ai.request.model"] = name(model)
    if isinstance(details.get("endpoint"), str):
        attrs["agentconsole.planner.endpoint"] = name(details["endpoint"])
    for key, attribute in _CALL_COUNTS.items():
        value = details.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            attrs[attribute] = value
    return attrs


def links_to(spans: Iterable[tuple[Span, Attributes]]) -> list[Link]:
    """Links to the spans that have a handle (none when telemetry is off)."""
    return [(s.link, attrs) for s, attrs in spans if s.link is not None]


# --- What the runner calls (kept here so the runner loop stays a loop) ------------------------


def no_span() -> AbstractContextManager[Span]:
    return nullcontext(NOOP_SPAN)


def tool_span(
    telemetry: Telemetry,
    contract: ToolContract,
    attempt: int,
    *,
    links: Sequence[tuple[Span, Attributes]] = (),
    backoff_ms: int = 0,
) -> AbstractContextManager[Span]:
    """The span of one attempt of a tool (``links``: the attempt it repeats)."""
    if not telemetry.enabled:
        return no_span()
    attrs = tool_attributes(contract.name, contract.version, contract.side_effect.value, attempt)
    if backoff_ms:
        attrs["agentconsole.tool.backoff_ms"] = backoff_ms  # waited before this attempt
    return telemetry.span(f"tool.{contract.name}", attrs, links=links_to(links))


def describe_execution(telemetry: Telemetry, span: Span, execution: ExecutionFacts) -> None:
    if not telemetry.enabled:
        return
    outcome = execution.outcome
    span.set(execution_attributes(execution))
    if outcome.status is not OutcomeStatus.SUCCEEDED:
        span.fail(outcome.code or outcome.status.value)


def describe_step(telemetry: Telemetry, span: Span, commit: Commit, *, state: RunState) -> None:
    """The planner.step span's summary (with the model call's, when a model planned it)."""
    if telemetry.enabled:
        span.set(step_attributes(commit, resuming=state.pending_proposal is not None))
