"""The model planner's I/O half (issue 12 item 1): one chat-completions call per planner step
to an OpenAI-compatible endpoint, through the official ``openai`` client, with retries.

What to send and what the answer means is ``runs.domain.gateway.model_planning`` (pure, tested
without a network). Here: the endpoint from settings, the call, the classification of its failures
and the backoff between attempts, bounded by the run's deadline.

The API key lives only in the ``ModelEndpoint`` built from settings and in the client's
``Authorization`` header: never in the run's planner configuration (which names the endpoint),
a trace event, an observation or a log line. ``repr`` hides it too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from policy.domain import strict_json
from policy.domain.strict_json import JsonRefused
from runs.domain.clock import Clock
from runs.domain.gateway import model_planning as mp
from runs.domain.gateway.calls import CallRecord, CallStatus, ModelRequest
from runs.domain.planning import PlannerContext, PlannerError, PlannerReply
from runs.domain.state import RunState

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_MAX_OUTPUT_TOKENS = 1024
DEFAULT_MAX_IN_FLIGHT = 64
PLACEHOLDER_KEY = "not-needed"  # local servers want no key; the client wants a string


@dataclass(frozen=True)
class ModelEndpoint:
    """One configured endpoint (``settings.AGENTCONSOLE_MODEL_ENDPOINTS[name]``)."""

    name: str
    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # Passed as ``max_tokens``, capped by what is left of the run's token budget.
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    # Calls in flight at once to this endpoint, over every gateway process (runs.calls): the
    # rest wait their turn in the database, fairly between subjects.
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT

    @classmethod
    def from_settings(cls, name: str, raw: Mapping[str, Any]) -> ModelEndpoint:
        return cls(
            name=name,
            base_url=str(raw["base_url"]),
            model=str(raw.get("model") or ""),
            api_key=str(raw.get("api_key") or ""),
            timeout_s=float(raw.get("timeout_s") or DEFAULT_TIMEOUT_S),
            max_attempts=int(raw.get("max_attempts") or DEFAULT_MAX_ATTEMPTS),
            max_output_tokens=int(raw.get("max_output_tokens") or DEFAULT_MAX_OUTPUT_TOKENS),
            max_in_flight=max(1, int(raw.get("max_in_flight") or DEFAULT_MAX_IN_FLIGHT)),
        )


class PlannerCallFailed(PlannerError):
    """The endpoint did not answer usefully; ``code`` is one of the ``PLANNER_*`` codes."""

    code = mp.PLANNER_UNAVAILABLE


def _client(endpoint: ModelEndpoint) -> openai.OpenAI:
    # import here: the openai package (about 50 MB resident) where a call is made; a worker
    # that splits its steps at the model call never makes one (the gateway does).
    import openai

    # Our own retry loop (deadline-aware, classified like tool outcomes): the client's is off.
    return openai.OpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or PLACEHOLDER_KEY,
        max_retries=0,
        timeout=endpoint.timeout_s,
    )


class OpenAIPlanner:
    """``Planner`` over one endpoint and model. ``sleep`` and ``clock`` are injected so a test
    retries without waiting."""

    source = mp.SOURCE

    def __init__(
        self,
        *,
        endpoint: ModelEndpoint,
        model: str | None = None,
        clock: Clock,
        sleep: Callable[[float], None],
        client: openai.OpenAI | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.model = model or endpoint.model
        if not self.model:
            raise PlannerError(
                f"model endpoint {endpoint.name!r} names no model and the run names none",
                code=mp.PLANNER_CONFIG_INVALID,
            )
        self.clock = clock
        self.sleep = sleep
        self._client = client

    @property
    def client(self) -> openai.OpenAI:
        """The endpoint's client, built on first use: only the inline call (``next``) sends.
        A worker that splits the step at the model call (``request``, ``answer``) builds a
        planner per step and never sends; building the client loads the TLS trust store
        (``ssl.create_default_context``), about 0.15 s of CPU per step for nothing (the
        runs_in_flight benchmark: most of a worker's step)."""
        if self._client is None:
            self._client = _client(self.endpoint)
        return self._client

    def request(self, state: RunState, context: PlannerContext) -> ModelRequest:
        """What this step asks the model (pure): the request body from the bounded context,
        with what reading the reply will need (the offered tools' versions, the observation
        ids the model saw)."""
        remaining_tokens = max(1, state.max_tokens - state.tokens_used)
        body = mp.build_request(
            context,
            model=self.model,
            max_output_tokens=min(self.endpoint.max_output_tokens, remaining_tokens),
        )
        return ModelRequest(
            endpoint=self.endpoint.name,
            model=self.model,
            body=body,
            deadline_ms=state.deadline_ms,
            hints={
                "versions": mp.tool_versions(context.tools),
                "sources": mp.observation_ids(context),
            },
        )

    def answer(self, state: RunState, call: CallRecord) -> PlannerReply:
        """The step's output from a recorded reply (pure); a call that failed for good raises
        its ``PLANNER_*`` code, as the inline call does."""
        if call.status is CallStatus.FAILED or call.failure is not None:
            failure = call.failure or {}
            code = str(failure.get("code") or mp.PLANNER_UNAVAILABLE)
            raise PlannerCallFailed(
                f"model endpoint {self.endpoint.name!r}: {code} after {call.attempts} attempt(s)",
                code=code,
                status=failure.get("status"),
                attempts=call.attempts,
            )
        return self._reply(state, call.hints, call.reply, call.attempts)

    def next(self, state: RunState, context: PlannerContext) -> PlannerReply:
        """The whole step in this process (inline mode: ``AGENTCONSOLE_MODEL_CALLS=inline``).

        1. Build the request from the bounded context (pure).
        2. Call, retrying timeouts, 429 and 5xx with backoff while the run's deadline allows.
        3. Interpret the answer (pure): a proposal, a final answer, or a PARSE_ERROR output.
        """
        request = self.request(state, context)
        response, attempts = self._call(request.body, deadline_ms=state.deadline_ms)
        return self._reply(state, request.hints, response, attempts)

    def _reply(
        self, state: RunState, hints: Mapping[str, Any], response: Any, attempts: int
    ) -> PlannerReply:
        usage = mp.usage_of(response)
        model = response.get("model") if isinstance(response, dict) else None
        output = mp.interpret(
            response,
            step=state.step + 1,
            versions=dict(hints.get("versions") or {}),
            sources=list(hints.get("sources") or []),
        )
        return PlannerReply(
            output=output,
            tokens=usage.total,
            details=mp.trace_summary(
                endpoint=self.endpoint.name,
                model=model if isinstance(model, str) and model else self.model,
                usage=usage,
                attempts=attempts,
            ),
        )

    def _call(self, body: dict[str, Any], *, deadline_ms: int) -> tuple[Any, int]:
        import openai  # import here: loaded with the client (``_client``)

        attempt = 0
        while True:
            attempt += 1
            left_s = (deadline_ms - self.clock.now_ms()) / 1000
            if left_s <= 0:
                raise PlannerCallFailed("the run's deadline came first", code=mp.PLANNER_TIMEOUT)
            try:
                raw = self.client.chat.completions.with_raw_response.create(
                    **body, timeout=min(self.endpoint.timeout_s, left_s)
                )
            except openai.APIError as exc:
                failure = failure_of(exc)
            else:
                return json_body(raw.text), attempt
            now = self.clock.now_ms()
            delay = mp.next_delay_ms(
                failure,
                attempt=attempt,
                max_attempts=self.endpoint.max_attempts,
                now_ms=now,
                deadline_ms=deadline_ms,
            )
            # Names and numbers only: the endpoint's name, never its URL's query or its key.
            log.warning(
                "model endpoint %s: %s (status %s, attempt %d)%s",
                self.endpoint.name,
                failure.code,
                failure.status,
                attempt,
                f", retrying in {delay} ms" if delay is not None else "",
            )
            if delay is None:
                raise PlannerCallFailed(
                    f"model endpoint {self.endpoint.name!r}: {failure.code} after {attempt} "
                    "attempt(s)",
                    code=failure.code,
                    status=failure.status,
                    attempts=attempt,
                )
            self.sleep(delay / 1000)


def failure_of(exc: openai.APIError) -> mp.CallFailure:
    """A failed call, classified (the same rules inline and in the gateway): a status the
    endpoint answered, a time-out, or a connection that never answered."""
    import openai  # import here: the caller caught one of its errors, so it is loaded

    if isinstance(exc, openai.APIStatusError):
        return mp.classify(
            status=exc.status_code, retry_after_s=retry_after_s(exc.response.headers)
        )
    return mp.classify(status=None, timed_out=isinstance(exc, openai.APITimeoutError))


def retry_after_s(headers: Any) -> float | None:
    """An HTTP ``Retry-After`` in seconds (None when absent or a date: our own backoff applies)."""
    value = headers.get("retry-after") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: our own backoff applies


def json_body(text: str) -> Any:
    # A body that is not JSON (or names a key twice, or holds what no JSON column stores) is a
    # malformed response: interpret() makes it a PARSE_ERROR.
    try:
        return strict_json.loads(text)
    except JsonRefused:
        return None
