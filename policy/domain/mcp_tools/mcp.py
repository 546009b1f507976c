"""MCP tools under the gate, the pure part (issue 12 item 2).

An operator registers an MCP server and accepts each of its tools with a policy of their own
(capability, resource rule, side effect, confirmation, timeout). This module turns one accepted
``tools/list`` entry plus that policy into a ``ToolContract``; the gate, the ledger and the
executor then treat it as any other tool. It does no I/O: the call itself is the ``McpCall``
the composition root hands in (``policy.mcp.client``).

Three rules live here:

1. **Annotations only tighten** (``effective_policy``). ``readOnlyHint``, ``destructiveHint``,
   ``idempotentHint`` and ``openWorldHint`` are claims of the server. A hint can raise the side
   effect class or the confirmation mode the operator chose; it never lowers either. An absent
   hint is no hint: the operator's setting stands (the MCP defaults, "destructive unless said
   otherwise", would make every unannotated read a per-call confirmation).
2. **Schemas are tightened, not refused** (``tighten_schema``). MCP input schemas rarely say
   ``additionalProperties: false``; the contract rules require it at every depth. Adding it
   where it is missing (or ``true``, or ``{}``) only removes inputs the planner could send, so
   it is stricter, never looser, and a tool stays usable. What cannot be tightened (an input
   that is not an object) is refused with ``MCP_SCHEMA_UNSUPPORTED``.
3. **Results are untrusted content** (``result_outcome``). Whatever the server says, its text
   and structured content are observations labelled ``untrusted-content``; an ``isError``
   result is a rejection with ``MCP_TOOL_ERROR`` whose text is not shown (a rejection's
   observation is trusted, so untrusted words may not ride in it).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policy.domain import canonical as hashing
from policy.domain.contracts import (
    _SUBSCHEMA_LISTS,
    _SUBSCHEMA_MAPS,
    _SUBSCHEMA_ONE,
    BeforeSend,
    CallFacts,
    ConfirmationMode,
    PathResource,
    ResourceError,
    ResourceRule,
    RetryPolicy,
    SideEffect,
    SubjectResource,
    ToolContext,
    ToolContract,
    Waiting,
    _describes_object,
    open_objects,
)
from policy.domain.errors import DomainError
from policy.domain.mcp_tools.mcp_listing import tool_name_ok
from policy.domain.observations import TrustLabel
from policy.domain.outcomes import ToolOutcome

# The key of ``_meta`` in a ``tools/call`` request that carries the command's idempotency
# token: a server that deduplicates by it makes a replay under the same token harmless.
IDEMPOTENCY_META_KEY = "agentconsole/idempotency-token"

# Only W3C trace context crosses to a server; any other header a context carries stays here.
TRACE_HEADERS = ("traceparent", "tracestate")

SERVER_NAME = r"^[a-z][a-z0-9-]{0,30}$"
_SECRET_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"  # noqa: S105 - a pattern for names
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_HEADER_NAME = r"^[A-Za-z0-9-]{1,64}$"
_CAPABILITY = r"^[A-Za-z0-9_.-]{1,32}:[A-Za-z0-9_.*-]{1,32}$"

MAX_DESCRIPTION = 2_000
MAX_RESULT_TEXT = 32_000  # characters of text content kept from one result (the rest is cut)
MAX_TIMEOUT_MS = 300_000

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "content": {"type": "array", "items": {"type": "object"}},
        "structured": {},
        "truncated": {"type": "boolean"},
    },
    "required": ["content"],
    "additionalProperties": False,
}


class McpError(DomainError):
    """A refusal of an operator's MCP request (400 unless the class says otherwise)."""

    code = "MCP_ERROR"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_SecretMap = dict[str, Annotated[str, Field(pattern=_SECRET_NAME)]]


class McpServerSpec(_Strict):
    """How to reach a server. Secrets are *names* (``AGENTCONSOLE_MCP_SECRETS`` holds the
    values): a plain value in a spec would be stored, listed and shown."""

    name: Annotated[str, Field(pattern=SERVER_NAME)]
    transport: Literal["stdio", "http"]
    command: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    args: Annotated[tuple[Annotated[str, Field(max_length=1024)], ...], Field(max_length=32)] = ()
    # environment variable of the server process -> secret name
    env_secrets: Annotated[_SecretMap, Field(max_length=32)] = {}
    url: Annotated[str, Field(max_length=2048)] | None = None
    # HTTP header sent to the server -> secret name (e.g. Authorization -> NOTES_TOKEN)
    header_secrets: Annotated[_SecretMap, Field(max_length=32)] = {}

    # Lax: a JSON list is a tuple of args (lax pydantic still turns no number into a string).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSpec:
        if self.transport == "stdio":
            if not self.command or self.url or self.header_secrets:
                raise ValueError("stdio takes command, args and env_secrets (no url, no headers)")
            if any(not re.match(_ENV_NAME, k) for k in self.env_secrets):
                raise ValueError("env_secrets keys must be environment variable names")
        else:
            if not self.url or self.command or self.args or self.env_secrets:
                raise ValueError("http takes url and header_secrets (no command, args or env)")
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("url must be an http(s) URL")
            if parts.username or parts.password:
                raise ValueError("url may not carry credentials: name a header secret instead")
            if any(not re.match(_HEADER_NAME, k) for k in self.header_secrets):
                raise ValueError("header_secrets keys must be HTTP header names")
        return self

    def secret_names(self) -> tuple[str, ...]:
        return tuple(sorted({*self.env_secrets.values(), *self.header_secrets.values()}))


class FixedScope(_Strict):
    """Every call acts on one named resource (default ``mcp/<server>/<tool>``)."""

    kind: Literal["fixed"] = "fixed"
    scope: Annotated[str, Field(min_length=1, max_length=256)]


class SubjectScope(_Strict):
    """The call acts on the run's own subject."""

    kind: Literal["subject"] = "subject"


class PathScope(_Strict):
    """A path argument, normalized, that can never leave ``root``."""

    kind: Literal["path"] = "path"
    field: Annotated[str, Field(min_length=1, max_length=64)] = "path"
    root: Annotated[str, Field(min_length=1, max_length=256)]


class ArgumentScope(_Strict):
    """A string argument names the resource (a board, a repository, a mailbox)."""

    kind: Literal["argument"] = "argument"
    field: Annotated[str, Field(min_length=1, max_length=64)]


ScopeSpec = Annotated[
    FixedScope | SubjectScope | PathScope | ArgumentScope, Field(discriminator="kind")
]


class McpToolPolicy(_Strict):
    """The operator's configuration of one tool: the contract fields the server cannot set."""

    capability: Annotated[str, Field(pattern=_CAPABILITY)]
    side_effect: SideEffect
    confirmation: ConfirmationMode
    timeout_ms: Annotated[int, Field(ge=100, le=MAX_TIMEOUT_MS)] = 10_000
    resource: ScopeSpec | None = None
    logged_fields: Annotated[tuple[str, ...], Field(max_length=32)] = ()
    redacted_fields: Annotated[tuple[str, ...], Field(max_length=32)] = ()

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


@dataclass(frozen=True)
class FixedResource:
    scope: str
    kind: str = "fixed"
    field: str | None = None

    def derive(self, arguments: Mapping[str, Any], facts: CallFacts) -> str:
        return self.scope


@dataclass(frozen=True)
class ArgumentResource:
    field: str
    kind: str = "argument"

    def derive(self, arguments: Mapping[str, Any], facts: CallFacts) -> str:
        value = arguments.get(self.field)
        if not isinstance(value, str) or not value:
            raise ResourceError("INVALID_RESOURCE", f"{self.field} must be a non-empty string")
        return value


# --- annotations: hints that only tighten -------------------------------------------------

_EFFECT_RANK = {
    SideEffect.READ: 0,
    SideEffect.IDEMPOTENT_WRITE: 1,
    SideEffect.COMPENSATABLE_WRITE: 2,
    SideEffect.IRREVERSIBLE: 3,
}
_CONFIRM_RANK = {
    ConfirmationMode.NEVER: 0,
    ConfirmationMode.PER_RUN: 1,
    ConfirmationMode.PER_CALL: 2,
}


@dataclass(frozen=True)
class Effective:
    side_effect: SideEffect
    confirmation: ConfirmationMode
    tightened: tuple[str, ...]  # what a hint changed, in words, for the operator


def effective_policy(policy: McpToolPolicy, annotations: Mapping[str, Any] | None) -> Effective:
    """The side effect and confirmation a tool runs with: the operator's, raised by hints.

    - ``destructiveHint: true``: irreversible, confirmed per call.
    - ``readOnlyHint: false`` on a tool the operator set as a read: a write (idempotent if
      ``idempotentHint: true``, else irreversible), confirmed per call. The operator's own
      write setting is left alone: there the hint says nothing new.
    - ``idempotentHint: false`` on an idempotent write: irreversible (a lost worker's call is
      not replayed under its token; a person settles it).
    - ``readOnlyHint: true``, ``destructiveHint: false``, ``idempotentHint: true`` and
      ``openWorldHint`` (either value) change nothing: the first three would only relax, and
      every MCP result is untrusted content whatever the world it comes from.
    Only a JSON ``true``/``false`` counts as a hint (``1`` or ``"yes"`` is ignored).
    """
    hints = annotations if isinstance(annotations, Mapping) else {}
    effect, confirm = policy.side_effect, policy.confirmation
    notes: list[str] = []

    def raise_to(new_effect: SideEffect, new_confirm: ConfirmationMode | None, why: str) -> None:
        nonlocal effect, confirm
        before = (effect, confirm)
        if _EFFECT_RANK[new_effect] > _EFFECT_RANK[effect]:
            effect = new_effect
        if new_confirm is not None and _CONFIRM_RANK[new_confirm] > _CONFIRM_RANK[confirm]:
            confirm = new_confirm
        if (effect, confirm) != before:
            notes.append(
                f"{why}: {before[0].value}/{before[1].value} -> {effect.value}/{confirm.value}"
            )

    if hints.get("destructiveHint") is True:
        raise_to(SideEffect.IRREVERSIBLE, ConfirmationMode.PER_CALL, "destructiveHint")
    if hints.get("readOnlyHint") is False and policy.side_effect is SideEffect.READ:
        write = (
            SideEffect.IDEMPOTENT_WRITE
            if hints.get("idempotentHint") is True
            else SideEffect.IRREVERSIBLE
        )
        raise_to(write, ConfirmationMode.PER_CALL, "readOnlyHint false")
    if hints.get("idempotentHint") is False and effect is SideEffect.IDEMPOTENT_WRITE:
        raise_to(SideEffect.IRREVERSIBLE, None, "idempotentHint false")
    return Effective(effect, confirm, tuple(notes))


# --- schemas: tightened to the contract rules ---------------------------------------------


def tighten_schema(schema: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``schema`` with ``additionalProperties: false`` on every object schema that lets
    unknown keys through (the places ``open_objects`` names), and those places.

    A map (``additionalProperties`` a real schema) is kept. Branches of ``allOf`` are closed
    one by one, which can make a composed schema accept less than the server meant: stricter,
    the accepted imprecision (the operator sees the tightened schema before accepting)."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise McpError(
            "the tool's input schema must describe an object", code="MCP_SCHEMA_UNSUPPORTED"
        )
    tightened = copy.deepcopy(dict(schema))
    places = open_objects(tightened)
    _close(tightened)
    left = open_objects(tightened)
    if left:  # pragma: no cover - _close walks what open_objects walks
        raise McpError(f"schema stays open at {left}", code="MCP_SCHEMA_UNSUPPORTED")
    return tightened, tuple(places)


def _close(node: Any) -> None:
    if not isinstance(node, dict):
        return
    extra = node.get("additionalProperties", True)
    if _describes_object(node) and (extra is True or extra == {}):
        node["additionalProperties"] = False
    for key in _SUBSCHEMA_MAPS:
        subs = node.get(key)
        for sub in subs.values() if isinstance(subs, dict) else ():
            _close(sub)
    for key in _SUBSCHEMA_LISTS:
        subs = node.get(key)
        for sub in subs if isinstance(subs, list) else ():
            _close(sub)
    for key in _SUBSCHEMA_ONE:
        _close(node.get(key))


# --- results: untrusted content -----------------------------------------------------------


def result_outcome(result: Mapping[str, Any]) -> ToolOutcome:
    """A ``tools/call`` result (as JSON) as a tool outcome.

    Text blocks keep their text (cut at ``MAX_RESULT_TEXT`` characters in all, ``truncated``
    says so); images, audio and binary resources are named, not carried; structured content
    is kept as the JSON value it is. ``isError`` is a rejection: the server answered and the
    tool said no, so nothing took effect as far as the protocol can tell."""
    if result.get("isError") is True:
        return ToolOutcome.rejected("MCP_TOOL_ERROR", "the MCP tool reported an error")
    budget = MAX_RESULT_TEXT
    truncated = False
    blocks: list[dict[str, Any]] = []
    raw = result.get("content")
    for block in raw if isinstance(raw, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        text = block.get("text")
        resource = block.get("resource")
        if kind == "resource" and isinstance(resource, Mapping):
            text = resource.get("text")
        if isinstance(text, str) and kind in ("text", "resource"):
            kept = text[:budget]
            truncated = truncated or len(kept) < len(text)
            budget -= len(kept)
            item: dict[str, Any] = {"type": kind, "text": kept}
            if kind == "resource" and isinstance(resource, Mapping):
                item["uri"] = str(resource.get("uri", ""))[:2048]
            blocks.append(item)
        elif kind == "resource_link":
            blocks.append({"type": kind, "uri": str(block.get("uri", ""))[:2048]})
        else:
            mime = block.get("mimeType") if kind != "resource" else None
            blocks.append({"type": str(kind)[:32], "omitted": True, "mimeType": mime})
    value: dict[str, Any] = {"content": blocks}
    structured = result.get("structuredContent")
    if structured is not None:
        value["structured"] = structured
    if truncated:
        value["truncated"] = True
    return ToolOutcome.succeeded(value)


# --- the contract -------------------------------------------------------------------------


class McpCall(Protocol):
    """Calls one MCP tool for the executor (``policy.mcp.client.call_tool``).

    It checks the server's live listing of ``tool`` against ``pin`` before calling (refusing
    with ``MCP_TOOL_CHANGED``), passes the context's idempotency token in ``_meta`` and its
    trace headers to an HTTP server, and classifies transport errors: before the request was
    sent, ``failed`` (retryable); after, ``unknown`` for a write and ``failed`` (retryable)
    for a read (asking again cannot make a second effect)."""

    def __call__(
        self,
        server: McpServerSpec,
        *,
        tool: str,
        arguments: dict[str, Any],
        ctx: ToolContext,
        pin: str,
        read_only: bool,
        timeout_ms: int,
    ) -> ToolOutcome: ...


@dataclass(frozen=True)
class AcceptedTool:
    """An accepted tool as stored: what was accepted, and whether the server still lists it
    so (``listed_pin``: the pin of the last listing seen; empty when the tool disappeared)."""

    server: McpServerSpec
    listing: Mapping[str, Any]
    policy: McpToolPolicy
    revision: int
    accepted_pin: str
    listed_pin: str


def contract_name(server: str, tool: str) -> str:
    # Underscores, not dots: OpenAI-compatible endpoints accept ^[A-Za-z0-9_-]{1,64}$ only.
    return f"mcp__{server}__{tool}"


def _resource(policy: McpToolPolicy, server: str, tool: str) -> ResourceRule:
    spec = policy.resource
    if spec is None:
        return FixedResource(scope=f"mcp/{server}/{tool}")
    if isinstance(spec, FixedScope):
        return FixedResource(scope=spec.scope)
    if isinstance(spec, SubjectScope):
        return SubjectResource()
    if isinstance(spec, PathScope):
        return PathResource(field=spec.field, root=spec.root)
    return ArgumentResource(field=spec.field)


def _changed(arguments: dict[str, Any], facts: CallFacts) -> tuple[str, str]:
    return ("MCP_TOOL_CHANGED", "the server's tool changed since it was accepted")


# ``policy.mcp.client.call_tool_async``: ``McpCall`` awaited, with ``before_send``.
McpAsyncCall = Callable[..., Awaitable[ToolOutcome]]


def mcp_contract(
    tool: AcceptedTool, *, call: McpCall, acall: McpAsyncCall | None = None
) -> ToolContract:
    """The contract of an accepted tool. Raises ``McpError`` or ``RegistryError`` when the
    listing and the policy do not make one (checked when the operator accepts).

    A tool the server lists differently now (or no longer lists) is still registered, so the
    gate refuses a proposal for it with ``MCP_TOOL_CHANGED`` at the semantic layer (before any
    grant, confirmation or call) instead of an unknown-tool error. With ``acall`` the gateway
    can make the call too (``waiting``), while the run holds no worker."""
    name = tool.listing.get("name")
    if not tool_name_ok(name):
        raise McpError("the tool's name is not an MCP tool name", code="MCP_TOOL_NAME_UNSUPPORTED")
    schema, _ = tighten_schema(tool.listing.get("inputSchema"))
    effective = effective_policy(tool.policy, _mapping(tool.listing.get("annotations")))
    server = tool.server
    pin = tool.accepted_pin
    read_only = effective.side_effect is SideEffect.READ
    timeout_ms = tool.policy.timeout_ms

    def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return call(
            server,
            tool=name,
            arguments=arguments,
            ctx=ctx,
            pin=pin,
            read_only=read_only,
            timeout_ms=timeout_ms,
        )

    async def wait(
        arguments: dict[str, Any], ctx: ToolContext, *, timeout_ms: int, before_send: BeforeSend
    ) -> ToolOutcome:
        assert acall is not None  # noqa: S101 - only offered with one
        return await acall(server, tool=name, arguments=arguments, ctx=ctx, pin=pin,
                           read_only=read_only, timeout_ms=min(timeout_ms, tool.policy.timeout_ms),
                           before_send=before_send)  # fmt: skip

    description = tool.listing.get("description")
    return ToolContract(
        name=contract_name(server.name, name),
        version=str(tool.revision),
        description=(description if isinstance(description, str) else "")[:MAX_DESCRIPTION],
        input_schema=schema,
        output_schema=OUTPUT_SCHEMA,
        required_capabilities=(tool.policy.capability,),
        side_effect=effective.side_effect,
        confirmation=effective.confirmation,
        timeout_ms=timeout_ms,
        execute=execute,
        resource=_resource(tool.policy, server.name, name),
        logged_fields=tool.policy.logged_fields,
        redacted_fields=tool.policy.redacted_fields,
        output_trust=TrustLabel.UNTRUSTED_CONTENT,
        semantic_checks=(_changed,) if tool.listed_pin != tool.accepted_pin else (),
        # Only failures known to have had no effect are retryable (see McpCall).
        retry=RetryPolicy(max_attempts=2, backoff_ms=250),
        secret_names=server.secret_names(),
        # One lane, one limit of calls in flight, per server (its name never holds ':').
        waiting=Waiting(f"mcp:{server.name}", wait) if acall is not None else None,
    )


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def pin(listing: Mapping[str, Any]) -> str:
    return hashing.mcp_tool_pin(dict(listing))
