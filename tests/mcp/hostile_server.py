"""An MCP server (official SDK) that serves hostile data, for the error sweep of what MCP servers
send (issue 21 items 8 and 9):

    python hostile_server.py --case names|duplicate-key|nan|lone-surrogate [--http PORT]

- ``names``: tools named ``a/b</x>``, ``..`` and ``lookup\\n``, two tools listed under one name
  (``twinA``), a description with a NUL, ``_meta`` nested 70 deep; ``fine`` (markup in its
  description), and two tools whose answers we cannot keep: text with a NUL (``nul_text``),
  structured content with a key twice (``twin_keys``).
- ``duplicate-key``: a plain listing, except that one input schema names a property twice.
- ``nan``: one input schema's ``default`` is ``NaN``.
- ``lone-surrogate``: one description holds ``\\ud800``.

The SDK writes only plain JSON, so the hostile parts are written by rewriting what it sends,
in place and length for length (so an HTTP Content-Length stays right): ``"dupkey2"`` becomes
``"dupkey1"``, ``"@@NAN@@"`` becomes ``NaN`` (padded with JSON whitespace), ``@@SURR`` becomes
the escape ``\\ud800``, ``"twinB"`` becomes ``"twinA"``.
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

REWRITES = (
    (b'"dupkey2"', b'"dupkey1"'),
    (b'"@@NAN@@"', b"NaN      "),
    (b"@@SURR", b"\\ud800"),
    (b'"twinB"', b'"twinA"'),
)


def rewrite(data: bytes) -> bytes:
    for old, new in REWRITES:
        data = data.replace(old, new)
    return data


def _deep(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"d": value}
    return value


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def build(case: str) -> MCPServer:
    server = MCPServer("hostile")

    def add(name: str, description: str, **extra: Any) -> None:
        def tool(topic: str = "") -> str:
            return f"{name}: {topic}"

        server.add_tool(tool, name=name, description=description, **extra)

    add("fine", "A plain tool. <b>bold</b> is text here.")
    if case == "names":
        for name in ("a/b</x>", "..", "lookup\n", "twinA", "twinB"):
            add(name, "hostile name")
        add("nul_desc", "a NUL \x00 in the description")
        add("deep", "_meta nested 70 deep", meta=_deep(70))

        @server.tool(name="nul_text")
        def nul_text() -> str:
            """Answers text with a NUL."""
            return "before \x00 after"

        @server.tool(name="twin_keys")
        def twin_keys() -> dict[str, int]:
            """Answers structured content with a key twice."""
            return {"dupkey1": 1, "dupkey2": 2}

    elif case == "duplicate-key":

        @server.tool(name="ambiguous")
        def ambiguous(dupkey1: str = "", dupkey2: int = 0) -> str:
            """Its input schema names the property dupkey1 twice."""
            return "?"

    elif case == "nan":

        @server.tool(name="not_a_number")
        def not_a_number(topic: str = "@@NAN@@") -> str:
            """Its input schema's default is NaN."""
            return "?"

    elif case == "lone-surrogate":
        add("surrogate", "a lone surrogate: @@SURR")
    return server


class _RewritingStdout(io.RawIOBase):
    """Standard output, each line rewritten before it leaves."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.pending = b""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        *lines, self.pending = (self.pending + bytes(data)).split(b"\n")
        for line in lines:
            self.raw.write(rewrite(line) + b"\n")
        self.raw.flush()
        return len(data)


class _RewritingApp:
    """The HTTP app, each response body rewritten (same length: Content-Length holds)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_rewritten(message: Any) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": rewrite(message.get("body", b""))}
            await send(message)

        await self.app(scope, receive, send_rewritten)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True)
    parser.add_argument("--http", type=int)
    args = parser.parse_args()
    server = build(args.case)
    if args.http:
        app = _RewritingApp(server.streamable_http_app())
        uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")
    else:
        stdout = sys.stdout.buffer
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_RewritingStdout(stdout)),
                                      encoding="utf-8", line_buffering=True)  # fmt: skip
        server.run("stdio")


if __name__ == "__main__":
    main()
