"""The SDK adapter (policy.mcp.client) against the real test servers: the token in ``_meta``,
trace context and secrets as HTTP headers, and transport outcomes classified by whether the
request was sent (before: failed and retryable; after: unknown for a write)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from policy.domain.contracts import CancelSignal, ToolContext
from policy.domain.mcp_tools.mcp import McpServerSpec, pin
from policy.domain.outcomes import OutcomeStatus, ToolOutcome
from policy.mcp.client import McpUnavailable, call_tool, list_tools
from tests.mcp.mcp_kit import TIMEOUT_MS, TOKEN, NotesServer, http_server
from tests.support.loops import run_in_own_loop

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def ctx(cancel: CancelSignal | None = None) -> ToolContext:
    return ToolContext(
        run_id="run-1",
        subject="alice",
        step=1,
        idempotency_token="t" * 64,
        deadline_ms=0,
        cancel=cancel or CancelSignal(),
        secrets={"NOTES_TOKEN": TOKEN},
        trace_headers={"traceparent": TRACEPARENT, "x-other": "kept here"},
    )


def call(notes: NotesServer, tool: str, *, read_only: bool, timeout_ms: int = TIMEOUT_MS,
         cancel: CancelSignal | None = None, **arguments: Any) -> ToolOutcome:  # fmt: skip
    spec = McpServerSpec.model_validate(notes.spec)
    listed = list_tools(spec, secrets={"NOTES_TOKEN": TOKEN}, timeout_s=TIMEOUT_MS / 1000)
    pins = {t["name"]: pin(t) for t in listed}
    return call_tool(
        spec,
        tool=tool,
        arguments=arguments,
        ctx=ctx(cancel),
        pin=pins[tool],
        read_only=read_only,
        timeout_ms=timeout_ms,
    )


def test_the_token_and_trace_context_reach_the_server(notes: NotesServer) -> None:
    _posts_hello(notes)


def test_a_server_started_without_the_fork_server_answers_the_same(
    plain_stdio_notes: NotesServer,
) -> None:
    """The other tests' servers are forked from a process that imported the SDK once
    (tests/mcp/forkserver.py); the script started the plain way answers the same."""
    assert "forked.py" not in " ".join(plain_stdio_notes.argv)
    _posts_hello(plain_stdio_notes)


def _posts_hello(notes: NotesServer) -> None:
    outcome = call(notes, "post_note", read_only=False, text="hello")
    assert outcome.status is OutcomeStatus.SUCCEEDED
    assert outcome.value == {
        "content": [{"type": "text", "text": '{\n  "posted": true,\n  "length": 5\n}'}],
        "structured": {"posted": True, "length": 5},
    }
    (seen,) = notes.calls("post_note")
    assert seen["meta"] == {"agentconsole/idempotency-token": "t" * 64}
    if notes.spec["transport"] == "http":
        assert seen["headers"]["traceparent"] == TRACEPARENT
        assert seen["headers"]["authorization"] == TOKEN
        assert "x-other" not in seen["headers"]  # only W3C trace context crosses


def test_a_call_from_a_thread_whose_event_loop_runs(notes: NotesServer) -> None:
    """A caller already inside a running event loop (an async view; Playwright's sync API
    drives one on the main thread) still lists and calls: anyio cannot nest loops, so the
    client moves the call to a thread of its own."""

    async def inside() -> ToolOutcome:
        return call(notes, "post_note", read_only=False, text="from a loop")

    # The test process's main thread may already run a loop (Playwright's, after the browser
    # tests): the loop runs in a thread of its own.
    outcome = run_in_own_loop(inside)
    assert outcome.status is OutcomeStatus.SUCCEEDED
    assert len(notes.calls("post_note")) == 1


@pytest.fixture
def http_notes(tmp_path: Path, mcp_secrets: None) -> Iterator[NotesServer]:
    yield from http_server(tmp_path)


def test_a_timeout_after_sending_is_unknown_for_a_write_and_retryable_for_a_read(
    http_notes: NotesServer,
) -> None:
    # HTTP: connecting and listing take a fraction of the 10 s (under 0.5 s for both calls on a
    # loaded 2-core machine); the tool takes a minute. The write and the read wait out their
    # time-outs side by side: one wait, not two.
    outcomes: dict[bool, ToolOutcome] = {}

    def one(read_only: bool) -> None:
        outcomes[read_only] = call(http_notes, "slow", read_only=read_only, timeout_ms=10_000)

    threads = [threading.Thread(target=one, args=(read_only,)) for read_only in (False, True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    write, read = outcomes[False], outcomes[True]
    assert (write.status, write.code) == (OutcomeStatus.UNKNOWN, "TOOL_TIMEOUT")
    assert (read.status, read.code, read.retryable) == (OutcomeStatus.FAILED, "TOOL_TIMEOUT", True)
    assert len(http_notes.calls("slow")) == 2  # both requests did reach the server


def _cancel_once_called(notes: NotesServer, tool: str, cancel: CancelSignal) -> threading.Thread:
    """Cancel as soon as the server has recorded the call: the request surely reached it."""

    def watch() -> None:
        while not notes.calls(tool) and not cancel.wait(0.05):
            pass
        cancel.cancel()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_cancel_after_sending_leaves_a_write_unknown(notes: NotesServer) -> None:
    cancel = CancelSignal()
    watcher = _cancel_once_called(notes, "slow", cancel)
    outcome = call(notes, "slow", read_only=False, cancel=cancel)
    watcher.join()
    assert (outcome.status, outcome.code) == (OutcomeStatus.UNKNOWN, "CANCELLED")


def test_a_cancel_before_the_call_is_known_to_have_no_effect(stdio_notes: NotesServer) -> None:
    cancel = CancelSignal()
    cancel.cancel()
    outcome = call(stdio_notes, "post_note", read_only=False, cancel=cancel, text="x")
    assert (outcome.status, outcome.retryable) == (OutcomeStatus.FAILED, False)
    assert stdio_notes.calls("post_note") == []


def test_an_unreachable_server_fails_retryably_before_sending(tmp_path: Path) -> None:
    spec = McpServerSpec(name="down", transport="http", url="http://127.0.0.1:9/mcp")
    outcome = call_tool(
        spec, tool="post_note", arguments={}, ctx=ctx(), pin="p", read_only=False,
        timeout_ms=5_000,
    )  # fmt: skip
    assert (outcome.status, outcome.retryable) == (OutcomeStatus.FAILED, True)
    with pytest.raises(McpUnavailable):
        list_tools(spec, secrets={}, timeout_s=5)


def test_a_missing_secret_fails_without_connecting(stdio_notes: NotesServer) -> None:
    spec = McpServerSpec.model_validate(stdio_notes.spec)
    bare = ctx()
    bare.secrets = {}
    outcome = call_tool(
        spec, tool="post_note", arguments={}, ctx=bare, pin="p", read_only=False,
        timeout_ms=5_000,
    )  # fmt: skip
    assert (outcome.status, outcome.code) == (OutcomeStatus.FAILED, "MCP_SECRET_MISSING")
