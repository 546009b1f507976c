"""What a step reads besides the run row, and what a plain commit leaves of it (issue 22).

``OrmRunStore.load(inputs=True)`` reads these with the run in one round trip and keeps them per
thread as the inputs of that version; ``after`` says what a commit left of them, so a worker
goes on from the state its own commit made without reading the run again. Plain values and
plain statements (``agentconsole.kernel.sqlbatch``), no model instances.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentconsole.kernel import sqlbatch
from memory.domain.working import WorkingItem, admit
from policy.domain.confirmation.confirmations import Confirmation
from policy.domain.decisions import ExecutableCommand, restore_command
from policy.domain.grants import CapabilityGrant
from runs import models as m
from runs.calls.models import ModelCall
from runs.domain.gateway.calls import CallKind, CallRecord, CallStatus
from runs.domain.ledger import LedgerStatus
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.orm.writers import writes_after


@dataclass(frozen=True)
class Inputs:
    """What a step reads besides the run row, as it was when the run was at ``version``.

    Kept per thread, for the last ``load(inputs=True)`` or the last ``apply`` that could say
    what it left (``_after``). Using it for that version is the same as reading again: grants,
    confirmations, working memory, the ledger's started row and the run's calls change only in
    commits of the run, each of which moves its version (a commit landing between the reads
    makes them newer than ``version``, and then the step's compare-and-set on ``version``
    fails). The planner configuration is read with them; ``None`` in ``started`` or ``call``
    is an answer ("none"), ``UNKNOWN`` is not (read it when asked)."""

    run_id: str
    version: int
    grants: Sequence[CapabilityGrant]
    confirmations: Sequence[Confirmation]
    working: Sequence[WorkingItem]
    planner: dict[str, Any]
    started: tuple[ExecutableCommand, int] | Unknown | None
    # The run's call of its highest step (step, record): a later step has none.
    call: tuple[int, CallRecord] | Unknown | None


class Unknown:
    """Not read (a commit changed it): ask the database."""


UNKNOWN = Unknown()


CALL_COLUMNS = (
    "step",
    "id",
    "status",
    "hints",
    "summary",
    "reply",
    "failure",
    "attempts",
    "sent_at",
)


def call_read(where: dict[str, Any], **kw: Any) -> sqlbatch.Read:
    return sqlbatch.select(ModelCall, CALL_COLUMNS, where, **kw)


def latest_call_read(run_id: str) -> sqlbatch.Read:
    # The latest model call; the (run, step) unique index of model calls answers it.
    return call_read({"run": run_id, "kind": CallKind.MODEL.value}, order_by=("-step",), limit=1)


def call_from_rows(rows: list[tuple[Any, ...]]) -> tuple[int, CallRecord] | None:
    if not rows:
        return None
    v = dict(zip(CALL_COLUMNS, rows[0], strict=True))
    record = CallRecord(
        call_id=v["id"],
        status=CallStatus(v["status"]),
        hints=v["hints"] or {},
        summary=v["summary"] or {},
        reply=v["reply"],
        failure=v["failure"],
        attempts=v["attempts"],
        sent=v["sent_at"] is not None,
    )
    return v["step"], record


def started_read(run_id: str) -> sqlbatch.Read:
    where = {"run": run_id, "status": LedgerStatus.STARTED.value}
    return sqlbatch.select(m.LedgerEntry, COMMAND_COLUMNS, where, order_by=("id",), limit=1)


def started_from_rows(rows: list[tuple[Any, ...]]) -> tuple[ExecutableCommand, int] | None:
    if not rows:
        return None
    values = dict(zip(COMMAND_COLUMNS, rows[0], strict=True))
    return command_from_values(values), values["attempt"]


def after(commit: Commit, state: RunState, before: Inputs | None) -> Inputs | None:
    """The inputs of the version ``commit`` made, from those of the version it started from,
    when the commit says exactly what it changed; else None (the next step loads the run).

    Grants gain their uses; working memory is admitted as the step's writer admits it (a new
    item whose id is already kept is not carried: the row keeps the old one); a commit that
    touches confirmations or hands off is not carried (the database decides those). The
    ledger's started row and the latest call become unknown when the commit writes them,
    except a consumed call, which stays the latest."""
    if (
        before is None
        or writes_after(commit)
        or commit.consume_confirmation is not None
        or commit.expire_pending_confirmations
    ):
        return None
    working = before.working
    if commit.working_items:
        current = {i.item_id for i in before.working}
        if any(i.item_id in current for i in commit.working_items):
            return None
        working = admit(list(before.working), commit.working_items, step=state.step)
    used = collections.Counter(commit.grant_uses)
    grants = [
        g.model_copy(update={"calls_used": g.calls_used + used[g.grant_id]})
        if used[g.grant_id]
        else g
        for g in before.grants
    ]
    started = before.started
    if commit.ledger_intent is not None or commit.ledger_settle or commit.ledger_attempt:
        started = UNKNOWN
    call = before.call
    if commit.model_request is not None or commit.abandon_calls:
        call = UNKNOWN
    elif (
        commit.consume_call is not None
        and isinstance(call, tuple)
        and call[1].call_id == commit.consume_call  # not a tool call's (runs.domain.tool_waits)
    ):
        step, record = call
        call = (step, dataclasses.replace(record, status=CallStatus.CONSUMED))
    return dataclasses.replace(
        before, version=state.version, grants=grants, working=working, started=started, call=call
    )


# The ledger columns a command is restored from.
COMMAND_COLUMNS = (
    "run_id", "proposal_id", "tool_name", "tool_version", "arguments", "arguments_hash",
    "proposal_hash", "idempotency_token", "resource", "deadline_ms", "grant_ids",
    "confirmation_id", "attempt",
)  # fmt: skip


def command_from_row(row: m.LedgerEntry) -> ExecutableCommand:
    return command_from_values({c: getattr(row, c) for c in COMMAND_COLUMNS})


def command_from_values(v: Mapping[str, Any]) -> ExecutableCommand:
    return restore_command(
        command_id=f"{v['run_id']}:{v['proposal_id']}",
        run_id=v["run_id"],
        proposal_id=v["proposal_id"],
        tool_name=v["tool_name"],
        tool_version=v["tool_version"],
        validated_arguments=v["arguments"],
        arguments_hash=v["arguments_hash"],
        proposal_hash=v["proposal_hash"],
        idempotency_token=v["idempotency_token"],
        resource=v["resource"],
        deadline_ms=v["deadline_ms"],
        granted_capabilities=(),
        grant_ids=tuple(v["grant_ids"]),
        confirmation_id=v["confirmation_id"],
        consume_confirmation=False,
    )
