"""The tool contract (SPEC §3, seed §3): a tool is not a function name.

A contract states identity, input/output schema, capabilities, side effect, confirmation mode,
timeout, which input fields may be logged, how the *resource* of a call is derived from its
arguments (so a grant's scope can be checked), and the callables that execute, verify, reconcile
and compensate. Concrete tools live on the Django side; this module only describes them.
"""

from __future__ import annotations

import enum
import posixpath
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from policy.domain.confirmation.approvers import DEFAULT_RULE, ApproverRule
from policy.domain.errors import RegistryError
from policy.domain.observations import TrustLabel
from policy.domain.origins.argument_policy import ArgumentRule, parse_rules
from policy.domain.outcomes import ToolOutcome, Verification


class SideEffect(enum.StrEnum):
    READ = "read"
    IDEMPOTENT_WRITE = "idempotent-write"
    COMPENSATABLE_WRITE = "compensatable-write"
    IRREVERSIBLE = "irreversible"


class ConfirmationMode(enum.StrEnum):
    NEVER = "never"
    PER_RUN = "per-run"
    PER_CALL = "per-call"


class ResourceError(Exception):
    """The arguments name a resource the contract refuses (semantic layer)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class CallFacts:
    """Trusted facts about the run that a resource rule or semantic check may use."""

    run_id: str
    subject: str
    step: int


class ResourceRule(Protocol):
    """How a call's resource is derived. ``field`` names the argument that carries it (None when
    the resource is not an argument, e.g. the run's subject): the gate hands the tool that
    argument *replaced by the derived resource*, so grants, constraints and the tool all see the
    same value (issue 9 item 1)."""

    # Read-only: the rules are frozen dataclasses, and a settable protocol attribute would
    # refuse them (and a str field where ``str | None`` is declared).
    @property
    def kind(self) -> str: ...

    @property
    def field(self) -> str | None: ...

    def derive(self, arguments: Mapping[str, Any], facts: CallFacts) -> str: ...


def bind_resource(
    rule: ResourceRule, arguments: dict[str, Any], facts: CallFacts
) -> tuple[str, dict[str, Any]]:
    """The resource and the arguments the tool will receive: the resource field set to the
    derived (normalized, defaulted) value. The same dict comes back when nothing changed."""
    resource = rule.derive(arguments, facts)
    field = getattr(rule, "field", None)
    current = arguments.get(field) if field is not None else None
    if field is None or (isinstance(current, str) and current == resource):
        return resource, arguments
    return resource, {**arguments, field: resource}


@dataclass(frozen=True)
class PathResource:
    """A path argument, normalized; it can never escape ``root`` (``..``, absolute, backslash)."""

    field: str = "path"
    root: str = "run-output"
    kind: str = "path"

    def derive(self, arguments: Mapping[str, Any], facts: CallFacts) -> str:
        raw = arguments.get(self.field)
        if not isinstance(raw, str) or not raw:
            raise ResourceError("INVALID_PATH", f"{self.field} must be a non-empty string")
        if "\\" in raw or "\x00" in raw or raw.startswith("/"):
            raise ResourceError(
                "PATH_OUTSIDE_ROOT", f"{self.field} must be relative to {self.root}/"
            )
        normalized = posixpath.normpath(raw)
        root = self.root.rstrip("/")
        if normalized == root or not normalized.startswith(root + "/"):
            raise ResourceError("PATH_OUTSIDE_ROOT", f"{self.field} must stay under {root}/")
        return normalized


@dataclass(frozen=True)
class SubjectResource:
    """The call acts on the run's own subject (e.g. that user's long-term memory)."""

    kind: str = "subject"
    field: str | None = None

    def derive(self, arguments: Mapping[str, Any], facts: CallFacts) -> str:
        return facts.subject


@dataclass(frozen=True)
class CorpusResource:
    field: str = "corpus"
    default: str = "public"
    kind: str = "corpus"

    def derive(self, arguments: Mapping[str, Any], facts: CallFacts) -> str:
        value = arguments.get(self.field, self.default)
        if not isinstance(value, str) or not value:
            raise ResourceError("INVALID_CORPUS", f"{self.field} must be a non-empty string")
        return value


def scope_covers(scope: str, resource: str) -> bool:
    """A grant scope covers itself and what is below it: ``run-output`` covers ``run-output/a``."""
    if scope == "*":
        return True
    scope = scope.rstrip("/")
    return resource == scope or resource.startswith(scope + "/")


# Keywords whose subschemas describe (part of) an accepted value. ``not``, ``if`` and
# ``contains`` are left out: an open object there admits nothing by itself.
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SUBSCHEMA_LISTS = ("prefixItems", "allOf", "anyOf", "oneOf")
_SUBSCHEMA_ONE = ("additionalProperties", "items", "then", "else", "unevaluatedProperties")


def _describes_object(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    return "object" in kinds or "properties" in schema or "required" in schema


def open_objects(schema: Any, at: str = "$") -> list[str]:
    """Where ``schema`` describes an object but lets unknown keys through unchecked (SPEC §3:
    unknown fields are rejected, at every depth). An object schema must set
    ``additionalProperties`` to false or to a schema that is not trivially true (a map)."""
    if not isinstance(schema, Mapping):
        return []
    found = []
    extra = schema.get("additionalProperties", True)
    if _describes_object(schema) and (extra is True or extra == {}):
        found.append(at)
    # A malformed keyword (properties as a list) is skipped here: check_schema names it later.
    for key in _SUBSCHEMA_MAPS:
        subs = schema.get(key)
        for name, sub in subs.items() if isinstance(subs, Mapping) else ():
            found += open_objects(
                sub, f"{at}.{key}.{name}" if key != "properties" else f"{at}.{name}"
            )
    for key in _SUBSCHEMA_LISTS:
        subs = schema.get(key)
        for index, sub in enumerate(subs if isinstance(subs, list) else ()):
            found += open_objects(sub, f"{at}.{key}[{index}]")
    for key in _SUBSCHEMA_ONE:
        found += open_objects(schema.get(key), f"{at}.{key}" if key != "items" else f"{at}[]")
    return found


class CancelSignal:
    """Cooperative cancellation handed to a tool (the AbortSignal of seed §13)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def cancel(self, reason: str = "CANCEL_REQUESTED") -> None:
        self.reason = reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as cancelled (a tool's interruptible point)."""
        return self._event.wait(seconds)


@dataclass
class ToolContext:
    """What the executor hands a tool. Secrets come from server settings, never from a proposal."""

    run_id: str
    subject: str
    step: int
    idempotency_token: str
    deadline_ms: int
    cancel: CancelSignal
    confirmation_id: str | None = None
    # The proposal this call serves (issue 12): with ``run_id`` it names the call for a tool's
    # own logs or an upstream request id; the idempotency token stays the dedup key.
    proposal_id: str | None = None
    secrets: Mapping[str, str] = field(default_factory=dict)
    trace_headers: Mapping[str, str] = field(default_factory=dict)
    services: Mapping[str, Any] = field(default_factory=dict)


Execute = Callable[[dict[str, Any], ToolContext], ToolOutcome]
Verify = Callable[[dict[str, Any], dict[str, Any], ToolContext], Verification]
Reconcile = Callable[[str, dict[str, Any], ToolContext], ToolOutcome]
Compensate = Callable[[dict[str, Any], ToolContext], ToolOutcome]
SemanticCheck = Callable[[dict[str, Any], CallFacts], "tuple[str, str] | None"]
# Awaited by the waiting call just before the request that may have an effect goes out; False:
# the call is no longer the caller's to make (not sent).
BeforeSend = Callable[[], Awaitable[bool]]


# The call of ``Waiting``: (arguments, ctx, *, timeout_ms, before_send) -> outcome, awaited.
WaitingFn = Callable[..., Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class Waiting:
    """A tool call that only waits on I/O (an MCP ``tools/call``), so a process built for
    waiting can make it in its event loop instead of a worker thread (issue 22 item 4; the
    gateway, ``runs.calls``). ``lane``: the calls that share a limit of calls in flight (one
    MCP server). ``call`` takes the same arguments and context as ``execute``, a
    ``timeout_ms`` (at most the contract's is used) and ``before_send``, awaited where an
    effect may begin."""

    lane: str
    call: WaitingFn


@dataclass(frozen=True)
class RetryPolicy:
    """``failed(retryable)`` is retried by the runner, same command and token, up to
    ``max_attempts`` attempts in all, waiting ``backoff_ms * 2**(attempt-1)`` between them."""

    max_attempts: int = 3
    backoff_ms: int = 100

    def delay_ms(self, attempt: int) -> int:
        # int(): typeshed types int ** int as Any (a negative exponent gives a float).
        return int(self.backoff_ms * 2 ** (attempt - 1))


@dataclass(frozen=True)
class PollingPolicy:
    """A tool meant to be polled: identical calls allowed up to ``max_polls`` in a run."""

    max_polls: int


@dataclass(frozen=True)
class ToolContract:
    name: str
    version: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    required_capabilities: tuple[str, ...]
    side_effect: SideEffect
    confirmation: ConfirmationMode
    timeout_ms: int
    execute: Execute
    resource: ResourceRule | None = None
    logged_fields: tuple[str, ...] = ()
    redacted_fields: tuple[str, ...] = ()
    output_trust: TrustLabel = TrustLabel.TRUSTED_TOOL
    verify: Verify | None = None
    reconcile: Reconcile | None = None
    compensate: Compensate | None = None
    semantic_checks: tuple[SemanticCheck, ...] = ()
    polling: PollingPolicy | None = None
    retry: RetryPolicy | None = None
    max_input_bytes: int = 16 * 1024
    isolated: bool = False
    secret_names: tuple[str, ...] = ()
    # Who may approve a confirmation of this tool (policy.domain.confirmation.approvers); a
    # deployment's or profile's tool policy may choose another where the gate holds the proposal.
    approvers: ApproverRule = DEFAULT_RULE
    # The same call, for a process built for waiting (None: it runs in the executor only).
    waiting: Waiting | None = None
    # What a call may do with an argument derived from untrusted content, per top-level
    # argument: "refuse", "confirm" or "carry" (policy.domain.origins.argument_policy). The tool's
    # author knows which of its arguments steer the effect (a recipient) and which carry data.
    untrusted_arguments: Mapping[str, ArgumentRule] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.version:
            raise RegistryError("a tool contract needs a name and a version")
        if self.approvers not in set(ApproverRule):
            names = ", ".join(r.value for r in ApproverRule)
            raise RegistryError(f"{self.name}: approvers must be one of {names}")
        # A plain string from a tool package ("four_eyes") becomes the rule itself.
        object.__setattr__(self, "approvers", ApproverRule(self.approvers))
        if ":" in self.version:
            # The idempotency token hashes "run:proposal:version:args" and a proposal id may
            # hold ":": a version with one could spell another command's token (issue 9 item 4).
            raise RegistryError(f"{self.name}: a tool version may not contain ':'")
        if self.timeout_ms <= 0:
            raise RegistryError(f"{self.name}: timeout_ms must be positive")
        if self.input_schema.get("type") != "object":
            raise RegistryError(f"{self.name}: input schema must describe an object")
        if self.input_schema.get("additionalProperties", True) is not False:
            # SPEC §3: unknown input fields are rejected; a contract may not opt out.
            raise RegistryError(f"{self.name}: input schema must set additionalProperties: false")
        open_at = open_objects(self.input_schema)
        if open_at:
            raise RegistryError(
                f"{self.name}: input schema accepts unknown fields at {', '.join(open_at)}: "
                "every object schema must set additionalProperties (false, or a schema for "
                "the values of a map)"
            )
        field_name = getattr(self.resource, "field", None)
        if field_name is not None and field_name not in self.input_schema.get("properties", {}):
            # The gate hands the tool this argument normalized; it must be one the tool accepts.
            raise RegistryError(f"{self.name}: resource field {field_name!r} is not an input")
        overlap = set(self.logged_fields) & set(self.redacted_fields)
        if overlap:
            raise RegistryError(f"{self.name}: fields both logged and redacted: {sorted(overlap)}")
        inputs = frozenset(self.input_schema.get("properties", {}))
        bad = parse_rules(self.untrusted_arguments, inputs=inputs, where=self.name)
        if bad is not None:
            raise RegistryError(f"{bad} (untrusted_arguments)")
        # Plain strings from a tool package ("refuse") become the rules themselves.
        rules = {k: ArgumentRule(v) for k, v in self.untrusted_arguments.items()}
        object.__setattr__(self, "untrusted_arguments", rules)

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.version)

    def describe(self) -> dict[str, Any]:
        """A JSON description for planners, the console and the API (no callables)."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "input_schema": dict(self.input_schema),
            "output_schema": dict(self.output_schema),
            "required_capabilities": list(self.required_capabilities),
            "side_effect": self.side_effect.value,
            "confirmation": self.confirmation.value,
            "timeout_ms": self.timeout_ms,
            "resource": getattr(self.resource, "kind", None),
            "polling": {"max_polls": self.polling.max_polls} if self.polling else None,
        }
