"""The MCP client adapter, on the official ``mcp`` SDK: list a server's tools, call one.

Plain Python (no Django). The SDK is async. The executor runs a tool in a thread of its own,
so ``call_tool`` runs its own event loop (``anyio.run``) in that thread; the gateway
(``runs.calls``, issue 22) awaits ``call_tool_async`` on its event loop instead, so a run
waiting on an MCP tool holds no worker. Either way one session per call: a stdio server is a
process started for the call and stopped after it, an HTTP server gets one streamable-HTTP
session. No connection outlives a call, so no state is shared between calls.

Errors are classified by where the call got to (``call_tool``): until the ``tools/call``
request is sent nothing can have happened, after it anything may have.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO, cast

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import RequestParamsMeta

from policy.domain import strict_json
from policy.domain.contracts import BeforeSend, CancelSignal, ToolContext
from policy.domain.mcp_tools.mcp import (
    IDEMPOTENCY_META_KEY,
    TRACE_HEADERS,
    McpError,
    McpServerSpec,
    result_outcome,
)
from policy.domain.mcp_tools.mcp import (
    pin as listing_pin,
)
from policy.domain.outcomes import ToolOutcome
from policy.domain.strict_json import JsonRefused
from policy.mcp import wire

log = logging.getLogger(__name__)

wire.install()  # every message a server sends is read strictly (policy.mcp.wire)

# How often a running call looks at the executor's cancel signal (a threading.Event).
_CANCEL_POLL_S = 0.02


class McpUnavailable(McpError):
    code = "MCP_SERVER_UNAVAILABLE"
    # 424 Failed Dependency: the request was fine, the server it names did not answer.
    http_status = 424


class SecretMissing(McpError):
    code = "MCP_SECRET_MISSING"


REFUSED = "MCP_RESPONSE_REFUSED"


class McpResponseRefused(McpUnavailable):
    """The server answered with JSON we refuse (a key twice, NaN...; ``policy.mcp.wire``)."""

    code = REFUSED


def _secret_values(names: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    missing = sorted(n for n in names.values() if n not in secrets)
    if missing:
        # The names are configuration, never the values: safe to say.
        raise SecretMissing(f"secrets not configured: {', '.join(missing)}", names=missing)
    return {key: secrets[name] for key, name in names.items()}


def _client(
    server: McpServerSpec,
    secrets: Mapping[str, str],
    trace_headers: Mapping[str, str],
    timeout_s: float,
    errlog: TextIO,
) -> tuple[Client, httpx2.AsyncClient | None]:
    if server.transport == "stdio":
        params = StdioServerParameters(
            command=server.command or "",  # never empty: the spec's validator
            args=list(server.args),
            # The SDK starts from a minimal environment (PATH, HOME, ...), not ours: a server
            # gets the secrets it was given and none of this process's.
            env=_secret_values(server.env_secrets, secrets),
        )
        return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=timeout_s), None
    headers = _secret_values(server.header_secrets, secrets)
    headers.update({k: v for k, v in trace_headers.items() if k.lower() in TRACE_HEADERS})
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout_s, read=timeout_s))
    transport = streamable_http_client(server.url or "", http_client=http)
    return Client(transport, read_timeout_seconds=timeout_s, cache=None), http


def _devnull() -> TextIO:
    # A stdio server's stderr is not ours to log: it may echo the secrets it was given.
    return open(os.devnull, "w")


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _run_sync(fn: Callable[[], Awaitable[Any]]) -> Any:
    """``anyio.run(fn)``, also from a thread whose event loop is running (an async caller, or
    a library that drives one on the main thread): there the call gets a thread of its own,
    since an event loop cannot be started inside a running one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn)
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(anyio.run(fn))
        except BaseException as exc:  # handed back to the caller as it is
            error.append(exc)

    worker = threading.Thread(target=target, name="mcp-call", daemon=True)
    worker.start()
    worker.join()
    if error:
        raise error[0]
    return result[0]


def list_tools(
    server: McpServerSpec, *, secrets: Mapping[str, str], timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """The server's ``tools/list`` entries as JSON (every page). Raises ``McpUnavailable``."""

    refused: list[wire.Refused] = []

    async def run() -> list[dict[str, Any]]:
        client, http = _client(server, secrets, {}, timeout_s, errlog)
        try:
            with anyio.fail_after(timeout_s):
                async with client:
                    try:
                        return await _all_tools(client)
                    except MCPError as exc:
                        # Noted, not raised: out of the SDK's task groups it would arrive
                        # wrapped in an exception group.
                        if (why := wire.refusal(exc)) is None:
                            raise
                        refused.append(why)
                        return []
        finally:
            if http is not None:
                await http.aclose()

    try:
        with _devnull() as errlog:
            tools = _run_sync(run)
    except McpError:
        raise
    except Exception as exc:  # the SDK and the transports raise many kinds; one answer
        log.warning("mcp server %s: listing failed: %s", server.name, type(exc).__name__)
        raise McpUnavailable(
            f"could not list the tools of {server.name}: {type(exc).__name__}", server=server.name
        ) from None
    if refused:
        log.warning("mcp server %s: listing refused: %s", server.name, refused[0].code)
        raise McpResponseRefused(
            f"the tool listing of {server.name} was refused: {refused[0].message}",
            server=server.name,
            reason=refused[0].code,
        )
    return tools


async def _all_tools(client: Client) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):  # a server that pages forever is cut off
        # cache_mode="refresh": the pin is checked against what the server says now.
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools.extend(_dump(t) for t in page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


@dataclass
class _Call:
    """One ``tools/call`` in its own session; ``sent`` says whether the request went out."""

    server: McpServerSpec
    tool: str
    arguments: dict[str, Any]
    ctx: ToolContext
    pin: str
    timeout_s: float
    errlog: TextIO
    read_only: bool
    before_send: BeforeSend | None = None
    sent: bool = False

    async def run(self) -> ToolOutcome:
        ctx = self.ctx
        client, http = _client(self.server, ctx.secrets, ctx.trace_headers, self.timeout_s,
                               self.errlog)  # fmt: skip
        try:
            async with client:
                try:
                    listed = {t.get("name"): t for t in await _all_tools(client)}
                except MCPError as exc:
                    if wire.refusal(exc) is None:
                        raise
                    # The listing that would show the tool unchanged was refused: not called.
                    return ToolOutcome.rejected(REFUSED, "the server's tool listing was refused")
                current = listed.get(self.tool)
                if current is None:
                    return ToolOutcome.rejected("MCP_TOOL_CHANGED", "the server no longer lists it")
                if listing_pin(current) != self.pin:
                    return ToolOutcome.rejected("MCP_TOOL_CHANGED", "re-accept the tool")
                if ctx.cancel.cancelled:
                    return ToolOutcome.failed(
                        "CANCELLED", "cancelled before the call", retryable=False
                    )
                if self.before_send is not None and not await self.before_send():
                    return ToolOutcome.failed(
                        "CANCELLED", "the call is no longer ours to make", retryable=False
                    )
                self.sent = True
                try:
                    result = await client.call_tool(
                        self.tool,
                        self.arguments,
                        read_timeout_seconds=self.timeout_s,
                        meta=cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: ctx.idempotency_token}),
                    )
                except MCPError as exc:
                    if (why := wire.refusal(exc)) is not None:
                        return self.answer_refused(why.code)
                    # A JSON-RPC error answer (unknown tool, invalid params): the server
                    # refused the request; the tool did not run.
                    log.info("mcp %s/%s: error %s", self.server.name, self.tool, exc.error.code)
                    return ToolOutcome.rejected(
                        "MCP_ERROR_RESPONSE", f"JSON-RPC error {exc.error.code}"
                    )
                return self.outcome(_dump(result))
        finally:
            if http is not None:
                await http.aclose()

    def outcome(self, result: dict[str, Any]) -> ToolOutcome:
        outcome = result_outcome(result)
        try:
            # What a JSON column cannot store (a NUL) would fail the step's commit, later.
            strict_json.check(outcome.value)
        except JsonRefused as exc:
            return self.answer_refused(exc.code)
        return outcome

    def answer_refused(self, reason: str) -> ToolOutcome:
        """The call was made and its answer refused: a read may be asked again; a write may
        have had its effect, so it is unknown (reconciled or handed to a person)."""
        log.warning("mcp %s/%s: answer refused: %s", self.server.name, self.tool, reason)
        if self.read_only:
            return ToolOutcome.failed(REFUSED, "the server's answer was refused", retryable=True)
        return ToolOutcome.unknown(REFUSED, "the server's answer was refused; effect unknown")

    async def bounded(self) -> ToolOutcome | None:
        """``run`` until it answers, the cancel signal is set or the timeout passes (None)."""
        outcome: list[ToolOutcome] = []
        with anyio.move_on_after(self.timeout_s):
            async with anyio.create_task_group() as group:

                async def work() -> None:
                    outcome.append(await self.run())
                    group.cancel_scope.cancel()

                group.start_soon(_watch, self.ctx.cancel, group)
                group.start_soon(work)
        return outcome[0] if outcome else None


def call_tool(
    server: McpServerSpec,
    *,
    tool: str,
    arguments: dict[str, Any],
    ctx: ToolContext,
    pin: str,
    read_only: bool,
    timeout_ms: int,
) -> ToolOutcome:
    """Call ``tool`` if the server still lists it as accepted (``pin``); see ``McpCall``.
    The executor's way: in the calling thread, on an event loop of its own."""
    call = functools.partial(
        call_tool_async,
        server,
        tool=tool,
        arguments=arguments,
        ctx=ctx,
        pin=pin,
        read_only=read_only,
        timeout_ms=timeout_ms,
    )
    return cast(ToolOutcome, _run_sync(call))


async def call_tool_async(
    server: McpServerSpec,
    *,
    tool: str,
    arguments: dict[str, Any],
    ctx: ToolContext,
    pin: str,
    read_only: bool,
    timeout_ms: int,
    before_send: BeforeSend | None = None,
) -> ToolOutcome:
    """``call_tool`` on the caller's event loop (the gateway's way, ``runs.calls``).

    1. Connect and list the tools (one session): the pin is checked against what this very
       server instance says now, not against a cache. Changed or gone: rejected, not called.
    2. Await ``before_send`` (the gateway records that the request goes out; False: not sent),
       then send ``tools/call`` with the token in ``_meta``; from here on a timeout, a cancel
       or a broken connection may have left an effect: ``unknown`` for a write.
    3. Map the result (``result_outcome``): untrusted content, or ``MCP_TOOL_ERROR``.
    A cancellation of the calling task passes through (its caller knows what was sent).
    """
    try:
        # Checked here, not in the session: inside the SDK's task groups it would arrive
        # wrapped in an exception group.
        _secret_values({**server.env_secrets, **server.header_secrets}, ctx.secrets)
    except SecretMissing:
        return ToolOutcome.failed("MCP_SECRET_MISSING", "a secret of the server is not set",
                                  retryable=False)  # fmt: skip
    with _devnull() as errlog:
        call = _Call(server, tool, arguments, ctx, pin, timeout_ms / 1000, errlog, read_only,
                     before_send)  # fmt: skip
        try:
            outcome = await call.bounded()
        except Exception as exc:  # the SDK's task groups raise groups of many kinds: one answer
            log.warning("mcp %s/%s: %s (sent=%s)", server.name, tool, type(exc).__name__, call.sent)
            return _interrupted(sent=call.sent, read_only=read_only, code="MCP_TRANSPORT_ERROR")
    if outcome is not None:
        return outcome
    code = "CANCELLED" if ctx.cancel.cancelled else "TOOL_TIMEOUT"
    if not call.sent and code == "CANCELLED":
        return ToolOutcome.failed(code, "cancelled before the call", retryable=False)
    return _interrupted(sent=call.sent, read_only=read_only, code=code)


async def _watch(cancel: CancelSignal, group: Any) -> None:
    while not cancel.cancelled:
        await anyio.sleep(_CANCEL_POLL_S)
    group.cancel_scope.cancel()


def _interrupted(*, sent: bool, read_only: bool, code: str) -> ToolOutcome:
    if not sent:
        return ToolOutcome.failed(code, "the request was not sent", retryable=True)
    if read_only:
        # The request may have reached the tool; a read has no effect to be unsure about.
        return ToolOutcome.failed(code, "interrupted during a read", retryable=True)
    return ToolOutcome.unknown(code, "the request was sent; its effect is unknown")
