"""Fault injection for tests, demos and the fault lab (issue 3, seed §16).

A scenario's ``faults`` block is trusted configuration stored on the run; planner output can
never set it. Faults wrap a tool's callables; they never bypass the gate or the ledger.

    {"tools": {"write_artifact": {"mode": "unknown", "times": 1, "reconcile": "real"}},
     "cancel_during_tool": {"tool": "write_artifact", "effect": "none"},
     "crash_worker_at": {"point": "after_effect", "tool": "write_artifact"},
     "delay_ms": 0}

Modes: ``unknown`` (the effect happens, the answer is lost), ``timeout`` (no effect, no answer
before the deadline), ``fail_retryable``, ``fail``, ``verify_mismatch`` (the effect happens and
is then changed behind the tool's back), ``hang`` (ignores cooperative cancel; only a hard stop
ends it). ``reconcile: "unknown"`` makes the tool's reconcile unable to tell. A crash is a real
``SIGKILL`` of the worker process, allowed only where ``AGENTCONSOLE_ALLOW_CRASH_FAULTS=1``.

None of it is reachable unless ``settings.AGENTCONSOLE_FAULTS_ENABLED`` (the fault lab, the
tests): otherwise ``agentconsole.wiring.executor`` builds the plain executor, isolated children
never read a plan, a crash is refused even with the environment variable, and a run with a
``faults`` block is refused at creation (``FAULTS_DISABLED``; issue 9 item 6).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from django.db import IntegrityError
from pydantic import BaseModel, ConfigDict, Field

from policy.domain.contracts import CancelSignal, ToolContext, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.outcomes import ToolOutcome
from runs.domain.ports import Execution
from runs.domain.state import RunState
from runs.engine.executor import ThreadExecutor
from runs.fault_lab.fault_switch import faults_enabled
from runs.models import FaultFiring, Run
from runs.services import run_cancel
from runs.tools import artifacts

CRASH_ENV = "AGENTCONSOLE_ALLOW_CRASH_FAULTS"
HANG_LIMIT_S = 120


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolFault(_Strict):
    # None: no injected outcome, only the reconcile override below.
    mode: (
        Literal["unknown", "timeout", "fail_retryable", "fail", "verify_mismatch", "hang"] | None
    ) = None
    times: Annotated[int, Field(ge=1, le=100)] = 1
    reconcile: Literal["real", "unknown"] = "real"


class CancelFault(_Strict):
    tool: Annotated[str, Field(min_length=1, max_length=128)]
    effect: Literal["none", "unknown"] = "none"


class CrashFault(_Strict):
    point: Literal["before_tool", "during_tool", "after_effect"]
    tool: Annotated[str, Field(min_length=1, max_length=128)]


class FaultPlan(_Strict):
    tools: dict[str, ToolFault] = {}
    cancel_during_tool: CancelFault | None = None
    crash_worker_at: CrashFault | None = None
    delay_ms: Annotated[int, Field(ge=0, le=60_000)] = 0


def _fire(run_id: str, fault: str) -> bool:
    """Record that ``fault`` fires for this run; False if it already did (committed first, so a
    crash fault never fires again after the worker restarts)."""
    try:
        FaultFiring.objects.create(run_id=run_id, fault=fault)
    except IntegrityError:
        return False
    return True


def _fire_nth(run_id: str, fault: str, times: int) -> bool:
    return any(_fire(run_id, f"{fault}:{i}") for i in range(times))


def _die(point: str) -> ToolOutcome:
    # Both switches: the fault layer is on *and* this process may be killed (a fault-lab worker).
    if not faults_enabled() or os.environ.get(CRASH_ENV) != "1":
        return ToolOutcome.failed("CRASH_FAULT_NOT_ALLOWED", point, retryable=False)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # SIGKILL is not deliverable late; never reached
    return ToolOutcome.failed("CRASH_FAULT_FAILED", point, retryable=False)


def faulted_contract(contract: ToolContract, plan: FaultPlan, run_id: str) -> ToolContract:
    """The same contract with its callables wrapped by the plan's faults for this tool."""
    tool_fault = plan.tools.get(contract.name)
    cancel = plan.cancel_during_tool if plan.cancel_during_tool else None
    crash = plan.crash_worker_at if plan.crash_worker_at else None
    if cancel and cancel.tool != contract.name:
        cancel = None
    if crash and crash.tool != contract.name:
        crash = None
    if not (tool_fault or cancel or crash or plan.delay_ms):
        return contract
    real_execute = contract.execute

    def execute(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        if plan.delay_ms and ctx.cancel.wait(plan.delay_ms / 1000):
            return ToolOutcome.failed("CANCELLED", "cancelled during delay", retryable=False)
        if crash and crash.point == "before_tool" and _fire(run_id, "crash"):
            return _die("before_tool")
        if cancel and _fire(run_id, "cancel_during_tool"):
            run_cancel(run_id=run_id, by="faultlab", reason="cancel_during_tool")
            ctx.cancel.wait(5)  # the worker's watcher turns "cancelling" into this signal
            if cancel.effect == "unknown":
                return ToolOutcome.unknown("CANCELLED_MID_EFFECT", "stopped mid-write")
            return ToolOutcome.failed("CANCELLED", "stopped before any effect", retryable=False)
        if (
            tool_fault
            and tool_fault.mode
            and _fire_nth(run_id, f"{contract.name}:{tool_fault.mode}", tool_fault.times)
        ):
            return _inject(tool_fault, contract, real_execute, arguments, ctx)
        if crash and crash.point == "during_tool" and _fire(run_id, "crash"):
            ctx.cancel.wait(0.05)
            return _die("during_tool")
        outcome = real_execute(arguments, ctx)
        if crash and crash.point == "after_effect" and _fire(run_id, "crash"):
            return _die("after_effect")
        return outcome

    reconcile = contract.reconcile
    if tool_fault and tool_fault.reconcile == "unknown":

        def reconcile(token: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
            return ToolOutcome.unknown("RECONCILE_UNAVAILABLE", "the external system is silent")

    return dataclasses.replace(contract, execute=execute, reconcile=reconcile)


def _tamper_artifact(arguments: dict[str, Any], ctx: ToolContext) -> None:
    """Another writer changes the file after write_artifact wrote it (its verify must notice)."""
    path = artifacts.target_path(ctx, arguments["path"])
    with path.open("ab") as handle:
        handle.write(b"\n[changed behind the tool's back]\n")


# ``verify_mismatch``: how to change a tool's stored effect behind its back, by tool name. Kept
# here, not on the contract: the domain contract carries no fault-lab hook.
TAMPERS: dict[str, Callable[[dict[str, Any], ToolContext], None]] = {
    "write_artifact": _tamper_artifact,
}


def _inject(
    fault: ToolFault,
    contract: ToolContract,
    real_execute: Any,
    arguments: dict[str, Any],
    ctx: ToolContext,
) -> ToolOutcome:
    if fault.mode == "unknown":
        real_execute(arguments, ctx)
        return ToolOutcome.unknown("RESPONSE_LOST", "the effect happened; the answer was lost")
    if fault.mode == "timeout":
        ctx.cancel.wait(HANG_LIMIT_S)
        return ToolOutcome.unknown("TOOL_TIMEOUT", "no answer before the deadline")
    if fault.mode == "fail_retryable":
        return ToolOutcome.failed("INJECTED_RETRYABLE_FAILURE", "try again", retryable=True)
    if fault.mode == "fail":
        return ToolOutcome.failed("INJECTED_FAILURE", "failed for good", retryable=False)
    if fault.mode == "verify_mismatch":
        tamper = TAMPERS.get(contract.name)
        if tamper is None:
            return ToolOutcome.failed(
                "FAULT_NOT_SUPPORTED", "no tamper hook for this tool", retryable=False
            )
        outcome = real_execute(arguments, ctx)
        tamper(arguments, ctx)
        return outcome
    # hang: ignores the cooperative signal; only a hard stop (isolated child) ends it early.
    time.sleep(HANG_LIMIT_S)
    return ToolOutcome.failed("HANG_ENDED", "hang outlived its limit", retryable=False)


def plan_for(run_id: str) -> FaultPlan | None:
    raw = Run.objects.filter(pk=run_id).values_list("faults", flat=True).first()
    return FaultPlan.model_validate(raw) if raw else None


class FaultingExecutor(ThreadExecutor):
    """The fault lab's and the tests' executor (only where AGENTCONSOLE_FAULTS_ENABLED): the
    plain ``ThreadExecutor`` plus one fault-plan lookup per tool call."""

    def run(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> Execution:
        plan = plan_for(state.run_id)
        if plan is not None:
            contract = faulted_contract(contract, plan, state.run_id)
        return super().run(command, contract, state, cancel)

    def recover(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> tuple[str, Execution]:
        plan = plan_for(state.run_id)
        if plan is not None:
            contract = faulted_contract(contract, plan, state.run_id)
        return super().recover(command, contract, state, cancel)
