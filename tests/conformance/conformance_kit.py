"""The two ``RunStore`` adapters and a driver that builds commits with the real step functions
(``start``, ``decide`` on fixture planner outputs with a small registry, ``settle``, ...).

The port has no reader for trace events or ledger rows, so each adapter also says how to list
them (``events``, ``ledger``, ``confirmation_statuses``); everything else a test checks goes
through the port itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from policy.domain.canonical import proposal_hash
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.contracts import (
    ConfirmationMode,
    SideEffect,
    SubjectResource,
    ToolContext,
    ToolContract,
)
from policy.domain.decisions import ExecutableCommand
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import TrustLabel
from policy.domain.outcomes import ToolOutcome
from policy.domain.registry import ToolRegistry
from runs.domain import lifecycle
from runs.domain.inmemory_store import InMemoryRunStore
from runs.domain.planning import FixturePlanner, PlannerContext
from runs.domain.ports import RunStore
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.domain.step.decide import decide
from runs.domain.step.settle import settle
from runs.domain.trace_chain import Row
from tests.support.planner import tool_call

NOW_MS = 1_700_000_000_000
SUBJECT = "alice"


def _never_called(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    raise AssertionError("the conformance suite never executes a tool; it settles by hand")


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


# A read tool whose results are outside content, and a write tool that needs a per-call
# confirmation: enough to reach every kind of write a commit can carry.
def _note_contract(
    spec: tuple[str, str, str, str], output: dict[str, Any], **fields: Any
) -> ToolContract:
    """A version-1 contract, never executed. ``spec``: (name, description, its one string
    argument, the capability it requires)."""
    name, description, field, capability = spec
    return ToolContract(
        name=name,
        version="1",
        description=description,
        input_schema=_object({field: {"type": "string", "minLength": 1, "maxLength": 64}}),
        output_schema=_object(output),
        required_capabilities=(capability,),
        timeout_ms=1_000,
        execute=_never_called,
        **fields,
    )


READ_NOTE = _note_contract(
    ("read_note", "Read a note by name.", "name", "notes:read"),
    {"text": {"type": "string"}},
    side_effect=SideEffect.READ,
    confirmation=ConfirmationMode.NEVER,
    logged_fields=("name",),
    output_trust=TrustLabel.UNTRUSTED_CONTENT,
)
WRITE_NOTE = _note_contract(
    ("write_note", "Write a note for the run's subject.", "text", "notes:write"),
    {"saved": {"type": "boolean"}},
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    confirmation=ConfirmationMode.PER_CALL,
    resource=SubjectResource(),
)
REGISTRY = ToolRegistry([READ_NOTE, WRITE_NOTE])
CONTRACTS = {c.name: c for c in (READ_NOTE, WRITE_NOTE)}


# --- planner outputs -------------------------------------------------------------------------


def read(pid: str, name: str, sources: Sequence[str] = ("user-1",)) -> dict[str, Any]:
    return tool_call(pid, "read_note", {"name": name}, sources=sources)


def write(pid: str, text: str) -> dict[str, Any]:
    return tool_call(pid, "write_note", {"text": text})


def unknown(pid: str, x: str) -> dict[str, Any]:
    """Rejected at the registry layer: a policy observation, no ledger row."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool_name": "no_such_tool",
        "tool_version": "1",
        "arguments": {"x": x},
    }


def final(answer: str, cites: Sequence[str]) -> dict[str, Any]:
    return {"kind": "final", "answer": answer, "citation_observation_ids": list(cites)}


def write_hash(text: str) -> str:
    return proposal_hash("write_note", "1", {"text": text})


# --- adapters --------------------------------------------------------------------------------


class MemoryAdapter:
    name = "memory"

    def __init__(self) -> None:
        self.store = InMemoryRunStore()

    def events(self, run_id: str) -> list[tuple[int, str]]:
        return [(e["sequence"], e["event"]) for e in self.store.events[run_id]]

    def chain(self, run_id: str) -> list[Row]:
        return [
            Row(
                e["sequence"], e["event"], e["proposal_id"], e["details"], e["content_digest"],
                e["chain_digest"],
            )
            for e in self.store.events[run_id]
        ]  # fmt: skip

    def ledger(self, run_id: str) -> dict[str, tuple[str, int]]:
        return {
            token: (row["status"], row["attempt"])
            for token, row in self.store.ledger.items()
            if row["run_id"] == run_id
        }

    def confirmation_statuses(self, run_id: str) -> dict[str, str]:
        return {c.confirmation_id: c.status.value for c in self.store.confirmations(run_id)}


class OrmAdapter:
    name = "orm"

    def __init__(self) -> None:
        from runs.orm.store import OrmRunStore

        self.store = OrmRunStore()

    def events(self, run_id: str) -> list[tuple[int, str]]:
        from runs.models import TraceEvent

        return list(
            TraceEvent.objects.filter(run_id=run_id)
            .order_by("sequence")
            .values_list("sequence", "event")
        )

    def chain(self, run_id: str) -> list[Row]:
        from runs.models import TraceEvent
        from runs.trace.trace_checks import ROW_COLUMNS

        rows = TraceEvent.objects.filter(run_id=run_id).order_by("sequence")
        return [Row(*r) for r in rows.values_list(*ROW_COLUMNS)]

    def ledger(self, run_id: str) -> dict[str, tuple[str, int]]:
        from runs.models import LedgerEntry

        return {
            token: (status, attempt)
            for token, status, attempt in LedgerEntry.objects.filter(run_id=run_id).values_list(
                "idempotency_token", "status", "attempt"
            )
        }

    def confirmation_statuses(self, run_id: str) -> dict[str, str]:
        # All of them: the port's ``confirmations`` may leave out consumed ones.
        from policy.models import Confirmation as ConfirmationRow

        return dict(ConfirmationRow.objects.filter(run_id=run_id).values_list("id", "status"))


# --- driver ----------------------------------------------------------------------------------


def new_state(run_id: str, **budgets: int) -> RunState:
    return RunState(
        run_id=run_id,
        subject=SUBJECT,
        goal="Find the retry rule and keep a note of it.",
        max_steps=budgets.get("max_steps", 20),
        max_tool_calls=budgets.get("max_tool_calls", 10),
        max_repeated_proposal=2,
        deadline_ms=NOW_MS + 3_600_000,
    )


@dataclass
class Driver:
    """One run in one adapter, moved by the real step functions."""

    adapter: MemoryAdapter | OrmAdapter
    run_id: str
    planner: FixturePlanner
    commits: list[Commit] = field(default_factory=list)

    @property
    def store(self) -> RunStore:
        return self.adapter.store

    def load(self) -> RunState:
        return self.store.load(self.run_id)

    def apply(self, commit: Commit) -> RunState:
        applied = self.store.apply(commit)
        self.commits.append(commit)
        return applied

    def start(self) -> RunState:
        return self.apply(lifecycle.start(self.load()))

    def next_output(self, state: RunState) -> Any:
        return self.planner.next(state, PlannerContext(goal=state.goal, step=state.step))

    def plan(self, state: RunState | None = None, **overrides: Any) -> Commit:
        """``decide`` on the fixture planner's next output (not applied)."""
        state = state or self.load()
        return self.propose(state, self.next_output(state), **overrides)

    def propose(
        self,
        state: RunState,
        raw: Any,
        *,
        grants: Sequence[CapabilityGrant] | None = None,
        confirmations: Sequence[Confirmation] | None = None,
        lookups: Any = None,
    ) -> Commit:
        """``decide`` on ``raw``; ``grants``/``confirmations``/``lookups`` default to fresh reads
        (a test passes older ones to play a writer that read before someone else wrote)."""
        return decide(
            state,
            raw,
            source="fixture",
            grants=self.store.grants(self.run_id) if grants is None else grants,
            confirmations=(
                self.store.confirmations(self.run_id) if confirmations is None else confirmations
            ),
            registry=REGISTRY,
            lookups=self.store.lookups(self.run_id) if lookups is None else lookups,
            now_ms=NOW_MS,
        )

    def settle(
        self,
        command: ExecutableCommand,
        outcome: ToolOutcome | None = None,
        state: RunState | None = None,
    ) -> Commit:
        """``settle`` ``command`` (not applied); by default it succeeded with a fresh value."""
        if outcome is None:
            value = (
                {"text": f"note {command.validated_arguments['name']}"}
                if command.tool_name == "read_note"
                else {"saved": True}
            )
            outcome = ToolOutcome.succeeded(value)
        return settle(
            state or self.load(),
            command,
            outcome,
            contract=CONTRACTS[command.tool_name],
            output_violation=None,
            verification=None,
            reconciled=False,
            duration_ms=3,
            lookups=self.store.lookups(self.run_id),
        )

    def execute_next(self) -> tuple[Commit, Commit]:
        """Plan a tool proposal, apply its intent, settle it as succeeded, apply that."""
        intent = self.plan()
        assert intent.command is not None, intent.events
        self.apply(intent)
        outcome = self.settle(intent.command)
        self.apply(outcome)
        return intent, outcome

    def snapshot(self) -> dict[str, Any]:
        """Everything the adapter holds about the run, through the port where it can."""
        store = self.store
        return {
            "state": store.load(self.run_id),
            "events": self.adapter.events(self.run_id),
            "ledger": self.adapter.ledger(self.run_id),
            "confirmations": self.adapter.confirmation_statuses(self.run_id),
            "grants": sorted((g.grant_id, g.calls_used) for g in store.grants(self.run_id)),
            "observations": [
                (o.observation_id, o.content_hash)
                for o in store.recent_observations(self.run_id, 10_000)
            ],
            "active_tool": store.active_tool(self.run_id),
        }


def make_run(
    adapter: MemoryAdapter | OrmAdapter,
    outputs: Sequence[Any] = (),
    *,
    read_max_calls: int | None = None,
    approved_texts: Sequence[str] = (),
    **budgets: int,
) -> Driver:
    """Create a run holding a ``notes:read`` grant and a ``notes:write`` grant on its subject,
    plus one scenario confirmation (approved) per text in ``approved_texts``."""
    run_id = f"run_{uuid.uuid4().hex}"
    grants = [
        CapabilityGrant(
            grant_id=f"{run_id}:g1",
            capability="notes:read",
            run_id=run_id,
            resource_scope="*",
            expires_at_step=50,
            max_calls=read_max_calls,
        ),
        CapabilityGrant(
            grant_id=f"{run_id}:g2",
            capability="notes:write",
            run_id=run_id,
            resource_scope=SUBJECT,
            expires_at_step=50,
        ),
    ]
    confirmations = [
        Confirmation(
            confirmation_id=f"{run_id}:approved{i}",
            run_id=run_id,
            proposal_hash=write_hash(text),
            status=ConfirmationStatus.APPROVED,
            expires_at_step=50,
        )
        for i, text in enumerate(approved_texts, start=1)
    ]
    planner = {"kind": "fixture", "outputs": list(outputs)}
    adapter.store.create(
        new_state(run_id, **budgets), grants=grants, confirmations=confirmations, planner=planner
    )
    return Driver(adapter, run_id, FixturePlanner(list(outputs)))
