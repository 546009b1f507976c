"""Which entries of a server's ``tools/list`` an operator is offered, and why not the others
(issue 21 item 9). Pure: ``policy.mcp.services`` records what this keeps and logs (and
answers) what it refuses.

An entry is refused, with a stable code, when:

- it is not an object (``MCP_TOOL_ENTRY_INVALID``);
- its name is not an MCP tool name (``MCP_TOOL_NAME_UNSUPPORTED``): the specification allows
  ``A-Z a-z 0-9 _ - .``, 1 to 128 characters; we keep 64 (the column, and what a model
  endpoint accepts in a function name) and refuse ``.`` and ``..``, which a browser or a proxy
  resolves away inside a URL path such as ``/tools/<server>/<tool>/accept/``. A name such as
  ``a/b</x>`` would otherwise reach URLs, element ids and logs;
- two entries carry one name (``MCP_TOOL_NAME_DUPLICATE``, both refused): which one is the tool
  the server runs when called by that name?
- it holds what we cannot store or pin (``MCP_TOOL_LISTING_INVALID``, with the
  ``policy.domain.strict_json`` reason): a NUL character, a lone surrogate, NaN, nesting deeper
  than 64, an integer no JSON number holds exactly;
- it comes after the first ``limit`` entries (``MCP_TOO_MANY_TOOLS``, one refusal for all).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from policy.domain import canonical as hashing
from policy.domain import strict_json
from policy.domain.strict_json import JsonRefused

# The characters the MCP specification allows in a tool name. fullmatch, not match with "$":
# "$" also matches before a trailing newline.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DOT_SEGMENTS = (".", "..")


def tool_name_ok(name: Any) -> TypeGuard[str]:
    return isinstance(name, str) and bool(TOOL_NAME.fullmatch(name)) and name not in _DOT_SEGMENTS


def shown(value: Any) -> str:
    """A name (any JSON value) as ``strict_json.printable`` shows it."""
    return strict_json.printable(value if isinstance(value, str) else repr(value)[:64])


@dataclass(frozen=True)
class RefusedTool:
    name: str  # ``shown``
    code: str
    message: str
    reason: str | None = None  # the strict_json code of MCP_TOOL_LISTING_INVALID


@dataclass(frozen=True)
class Screened:
    tools: dict[str, tuple[dict[str, Any], str]]  # name -> (the entry, its pin)
    refused: tuple[RefusedTool, ...]


def screen(listing: Sequence[Any], *, limit: int) -> Screened:
    """Split ``listing`` into the entries to offer (with their pins) and the refused ones."""
    kept = listing[:limit]
    refused: list[RefusedTool] = []
    if len(listing) > limit:
        left_out = f"{len(listing) - limit} entries past the first {limit}"
        refused.append(RefusedTool("", "MCP_TOO_MANY_TOOLS", left_out))
    # Only strings are counted: a name may be any JSON value, a list (unhashable) included.
    names = Counter(
        e["name"] for e in kept if isinstance(e, dict) and isinstance(e.get("name"), str)
    )
    tools: dict[str, tuple[dict[str, Any], str]] = {}
    for entry in kept:
        refusal = _refusal(entry, names)
        if refusal is not None:
            refused.append(refusal)
        else:
            tools[entry["name"]] = (entry, hashing.mcp_tool_pin(entry))
    return Screened(tools, tuple(refused))


def _refusal(entry: Any, names: Counter[str]) -> RefusedTool | None:
    if not isinstance(entry, dict):
        return RefusedTool(shown(entry), "MCP_TOOL_ENTRY_INVALID", "not an object")
    name = entry.get("name")
    if not tool_name_ok(name):
        message = "not an MCP tool name (1 to 64 of A-Z a-z 0-9 _ - .)"
        return RefusedTool(shown(name), "MCP_TOOL_NAME_UNSUPPORTED", message)
    if names[name] > 1:
        return RefusedTool(name, "MCP_TOOL_NAME_DUPLICATE", "listed more than once")
    try:
        strict_json.check(entry)
    except JsonRefused as exc:
        return RefusedTool(name, "MCP_TOOL_LISTING_INVALID", exc.message, reason=exc.code)
    return None
