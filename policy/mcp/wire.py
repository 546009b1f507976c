"""What an MCP server sends, read strictly before the SDK reads it (issue 21 item 8).

The SDK parses every message with pydantic, where the last of two equal keys wins silently and
``NaN`` is a number. A tool listing whose ``inputSchema`` names ``additionalProperties`` twice,
or a result with two ``isError`` keys, means one thing to us and maybe another to the server or
to a second client: nobody should pick one. The SDK offers no hook before that parse, so we
stand in for the one adapter its client transports parse with (stdio looks it up on
``mcp_types`` at each message, streamable HTTP imported it by name) and refuse, with
``policy.domain.strict_json.parse``, what it would have read.

A refused answer to one of our requests becomes a JSON-RPC error for that request at once (the
SDK would otherwise drop a message it cannot parse and leave the request waiting for its
timeout). The error's ``data`` is a ``Refused`` object, which no server can send: only a
parsed JSON value ever comes from one. The client (``policy.mcp.client``) turns it into
``MCP_RESPONSE_REFUSED``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp.client.streamable_http as streamable_http
import mcp_types
from mcp.shared.exceptions import MCPError
from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError
from pydantic_core import PydanticCustomError, ValidationError

from policy.domain import strict_json
from policy.domain.strict_json import JsonRefused


@dataclass(frozen=True)
class Refused:
    """Why a server's message was refused (a ``strict_json`` code and its message)."""

    code: str
    message: str


def refusal(exc: BaseException) -> Refused | None:
    """The refusal an ``MCPError`` carries, if it is one of ours."""
    data = exc.error.data if isinstance(exc, MCPError) else None
    return data if isinstance(data, Refused) else None


def _response_id(data: str | bytes) -> Any:
    """The id of a response, read leniently (the text was refused strictly); None when the
    message is not a response to one of our requests or its id is not plain."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or not ("result" in message or "error" in message):
        return None
    request_id = message.get("id")
    plain = isinstance(request_id, str | int) and not isinstance(request_id, bool)
    return request_id if plain else None


def _why_unread(data: str | bytes) -> Refused:
    try:
        strict_json.check(strict_json.parse(data))
    except JsonRefused as exc:
        return Refused(exc.code, exc.message)
    return Refused(strict_json.NOT_JSON, "not a JSON-RPC message")


class StrictMessages:
    """Stands in for the SDK's ``jsonrpc_message_adapter`` (a pydantic ``TypeAdapter``)."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def validate_json(self, data: str | bytes, /, **kwargs: Any) -> Any:
        try:
            strict_json.parse(data)
        except JsonRefused as exc:
            return self.refused(data, Refused(exc.code, exc.message))
        try:
            return self.adapter.validate_json(data, **kwargs)
        except ValueError:  # pydantic's ValidationError (a lone surrogate, not JSON-RPC...)
            return self.refused(data, _why_unread(data))

    def refused(self, data: str | bytes, why: Refused) -> JSONRPCError:
        """An error answering the request ``data`` responds to. When ``data`` answers no
        request of ours, the error the SDK expects from this adapter is raised (it drops the
        message, as it always did)."""
        request_id = _response_id(data)
        if request_id is None:
            kind = PydanticCustomError("refused", "refused: {why}", {"why": why.message})
            raise ValidationError.from_exception_data(
                "JSONRPCMessage", [{"type": kind, "loc": (), "input": None}]
            )
        error = ErrorData(code=PARSE_ERROR, message=f"refused: {why.message}", data=why)
        return JSONRPCError(jsonrpc="2.0", id=request_id, error=error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.adapter, name)


def install() -> None:
    """Put ``StrictMessages`` in front of the SDK's adapter (idempotent)."""
    for module in (mcp_types, streamable_http):
        current = module.jsonrpc_message_adapter
        if not isinstance(current, StrictMessages):
            module.jsonrpc_message_adapter = StrictMessages(current)  # type: ignore[attr-defined]
