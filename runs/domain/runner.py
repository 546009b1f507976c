"""The runner loop: small, around the pure step functions (STYLE: LangGraph's pregel loop).

    load → (start | precheck | plan → decide) → apply (one transaction) → execute tool (no
    transaction open) → settle → apply → …

The loop never holds a transaction while a planner or tool runs. Every write is
``store.apply(commit)``, a compare-and-set on the run version; on a conflict the loop reloads the
authoritative state and decides again.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from policy.domain.contracts import CancelSignal, ToolContract
from policy.domain.decisions import ExecutableCommand, reissue
from policy.domain.grants import CapabilityGrant
from policy.domain.outcomes import OutcomeStatus
from policy.domain.registry import ToolRegistry
from runs.domain import lifecycle, planning, tool_waits
from runs.domain import telemetry as tel
from runs.domain.clock import Clock, SystemClock
from runs.domain.errors import IntegrityViolation, VersionConflict
from runs.domain.gateway.calls import OPEN, SETTLED, call_id
from runs.domain.gateway.model_planning import offerable, usable_capabilities
from runs.domain.machine import Status, StopReason
from runs.domain.planning import (
    Planner,
    PlannerContext,
    PlannerError,
    WaitingPlanner,
    failure_details,
    unwrap,
)
from runs.domain.ports import Execution, Executor, RunStore, StepQuota, Watch, no_watch
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.domain.step.decide import decide
from runs.domain.step.settle import settle
from runs.domain.telemetry import NOOP_TELEMETRY, Attributes, Span, Telemetry

log = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES = 50


# A run whose model call was abandoned while it still runs (never by design: a stop abandons).
CALL_LOST = "MODEL_CALL_LOST"


@dataclass(frozen=True)
class _Planned:
    """A planner's output for the next step, with what ``decide`` records about it."""

    raw: Any
    source: str
    summary: dict[str, Any]
    tokens: int
    consume: str | None  # the model call whose reply this is
    preferences: dict[str, Any] | None = None  # those the planner was given with its context


def _context_summary(context: PlannerContext) -> dict[str, Any]:
    """What the planner saw, as a summary: sizes and keys, never the content."""
    return {
        "context_items": len(context.observations),
        "context_preferences": sorted(context.preferences)[:32],
    }


def _plans_next(state: RunState) -> bool:
    """The run's next move is a new planner step (where a slice may end)."""
    return state.status is Status.RUNNING and state.pending_proposal is None


class Runner:
    def __init__(
        self,
        *,
        store: RunStore,
        registry: ToolRegistry,
        executor: Executor,
        planner_for: Callable[[dict[str, Any]], Planner],
        clock: Clock | None = None,
        context_extras: Callable[[RunState], dict[str, Any]] | None = None,
        watch: Watch | None = None,
        quota: StepQuota | None = None,
        telemetry: Telemetry | None = None,
        defer_calls: bool = False,
    ) -> None:
        self.store = store
        self.registry = registry
        self.executor = executor
        self.planner_for = planner_for
        self.clock = clock or SystemClock()
        self.context_extras = context_extras
        self.watch = watch or no_watch
        self.quota = quota
        self.telemetry = telemetry or NOOP_TELEMETRY
        # Split a waiting planner's step at its model call (runs.domain.gateway.calls): the gateway
        # makes the call. False: the planner calls in this process (inline mode, the tests'
        # in-process runs, the scenario runner).
        self.defer_calls = defer_calls
        # (run id, step number) whose quota unit is paid: a commit that lost a race is decided
        # again for the same step and must not pay twice. Likewise a failed call's refund.
        self._paid: tuple[str, int] | None = None
        self._refunded: tuple[str, int] | None = None
        # The last advance ended because its slice did (not because the run waits).
        self.sliced = False

    def advance(
        self, run_id: str, *, max_iterations: int = 100_000, slice_steps: int = 0
    ) -> RunState:
        """Advance the run until it waits for a person, stops or ends; return its state.

        With ``slice_steps``, return after that many planner steps with the run still
        ``running`` and ``sliced`` set: the caller hands it back to the queue so other runs get
        a worker too. A run that returns ``running`` without ``sliced`` waits on its model
        call: the gateway sends it back once the reply is recorded.
        Only a new planner step ends a slice (a pending proposal is settled first), so the
        returned run holds no started command.

        One ``run`` span per advance (runs.domain.telemetry has the span model).
        """
        self.sliced = False
        with self.telemetry.span("run", {"agentconsole.run_id": run_id}) as span:
            state = self._advance(run_id, max_iterations=max_iterations, slice_steps=slice_steps)
            span.set(tel.run_attributes(state))
            return state

    def _advance(self, run_id: str, *, max_iterations: int, slice_steps: int) -> RunState:
        planners: list[Planner] = []

        def planner() -> Planner:
            # Built once per advance, from the configuration stored with the run (read with the
            # run's inputs).
            if not planners:
                config = self.store.planner_config(run_id, state.version)
                planners.append(self.planner_for(config))
            return planners[0]

        conflicts = 0
        first_step: int | None = None
        # A started-but-unsettled ledger row can only be left by an earlier, dead worker: within
        # one advance every command is settled before the loop goes on. Look once, first.
        look_for_orphan = True
        # The state this worker's last commit made, when the store knows its inputs: the next
        # iteration goes on from it instead of reading the run again (a writer that moved the
        # run meanwhile makes the next commit's compare-and-set fail, and then it is read).
        carried: RunState | None = None
        for _ in range(max_iterations):
            state = carried or self.store.load(run_id, inputs=True)
            carried = None
            first_step = state.step if first_step is None else first_step
            if look_for_orphan and state.status in (Status.RUNNING, Status.CANCELLING):
                look_for_orphan = False
                orphan = self.store.started_command(run_id, state.version)
                if orphan is not None:
                    # Intent committed, outcome never did: the gateway makes its call (the run
                    # waits, or takes the outcome), or a worker died mid-tool. Settle that
                    # command first, with its own token; never plan past an unknown effect.
                    if tool_waits.take(self, state, *orphan):
                        return state  # its call is the gateway's: this worker lets go
                    continue
            if slice_steps and _plans_next(state) and state.step - first_step >= slice_steps:
                self.sliced = True
                return state
            # A running run's iteration is a step (plan, or resume a confirmed proposal): its
            # span holds the gate's evaluation and the tool attempts the step starts.
            stepping = state.status is Status.RUNNING
            scope = self.telemetry.span("planner.step") if stepping else tel.no_span()
            with scope as step_span:
                try:
                    commit = self._next_commit(state, planner)
                    if commit is None:
                        return state
                    applied = self.store.apply(commit)
                except VersionConflict:
                    # Someone else moved the run (a cancel, a decision, another worker):
                    # re-decide from the authoritative state. Bounded so a livelock surfaces
                    # as an error.
                    step_span.set({"agentconsole.step.conflict": True})
                    conflicts += 1
                    if conflicts > MAX_CONFLICT_RETRIES:
                        raise
                    # The planner configuration is reloaded too: a user's erase (issue 9 item
                    # 11) may have rewritten it, and a cached copy would write the erased
                    # values back.
                    planners.clear()
                    continue
                except IntegrityViolation as exc:
                    # Not a race: retrying writes the same keys again. Stop here, once.
                    return self._integrity_stop(state, exc)
                if stepping:
                    tel.describe_step(self.telemetry, step_span, commit, state=state)
                if commit.model_request is not None or commit.tool_request is not None:
                    return applied  # the run waits for its call; this worker lets go
                if commit.command is not None:
                    applied = self._execute(applied, commit.command)
                carried = applied if self.store.inputs_kept(applied) else None
        raise RuntimeError(f"run {run_id} did not settle within {max_iterations} iterations")

    def _integrity_stop(self, state: RunState, exc: IntegrityViolation) -> RunState:
        """A running run whose commit broke a unique key fails with a handoff (a person looks
        at it) instead of staying in ``running``; anything else re-raises the stable error."""
        if state.status is not Status.RUNNING:
            raise exc
        log.error("run %s: %s (%s)", state.run_id, exc.code, exc.extra.get("constraint", ""))
        commit = lifecycle.fail(state, exc.code)
        commit.handoff_reason = exc.code
        return self.store.apply(commit)

    def _next_commit(self, state: RunState, planner: Callable[[], Planner]) -> Commit | None:
        if state.status is Status.CREATED:
            return lifecycle.start(state)
        if state.status is Status.CANCELLING:
            return None if self.store.active_tool(state.run_id) else lifecycle.finish_cancel(state)
        if state.status is not Status.RUNNING:
            return None
        now = self.clock.now_ms()
        resuming = state.pending_proposal is not None
        pre = lifecycle.precheck(state, now_ms=now, resuming=resuming)
        if pre is not None:
            return pre
        raw = None
        source = "pending"
        summary = None
        tokens = 0
        consume = given = None
        # Read once for the context (the tools these grants could allow) and the gate. Grants
        # change only in this run's own commits (grant uses): the version check covers the read.
        grants = self.store.grants(state.run_id, state.version)
        if not resuming:
            try:
                built = planner()
            except PlannerError as exc:  # the stored configuration names no usable planner
                return lifecycle.fail(state, exc.code, **failure_details(exc))
            planned = self._plan(state, built, grants, now)
            if not isinstance(planned, _Planned):
                return planned  # a commit that records a request or stops; None: waiting
            raw, source, summary = planned.raw, planned.source, planned.summary
            tokens, consume, given = planned.tokens, planned.consume, planned.preferences
        # A final answer's validation and a proposal's gate evaluation both happen in decide();
        # the span is named by what the output says it is (a final that fails to parse is a
        # final that failed validation).
        final = isinstance(raw, dict) and raw.get("kind") == "final"
        with self.telemetry.span("final.validate" if final else "policy.evaluate") as span:
            commit = decide(
                state,
                raw,
                source=source,
                grants=grants,
                confirmations=self.store.confirmations(state.run_id, state.version),
                registry=self.registry,
                lookups=self.store.lookups(state.run_id),
                now_ms=now,
                context_summary=summary,
                tokens=tokens,
                preferences=planning.preference_values(given, self.context_extras, state),
            )
            commit.consume_call = consume
            commit.tool_request = tool_waits.deferred(self, commit)
            if self.telemetry.enabled:
                span.set(tel.decision_attributes(commit, self.registry))
        return commit

    def _plan(
        self, state: RunState, planner: Planner, grants: Sequence[CapabilityGrant], now: int
    ) -> _Planned | Commit | None:
        """The planner's output for the next step, or the commit that stands for it.

        A planner that waits on a model (``WaitingPlanner``), in a runner told to split
        (``defer_calls``), is asked in two halves (``_plan_waiting``); any other answers here.
        """
        if self.defer_calls and isinstance(planner, WaitingPlanner):
            return self._plan_waiting(state, planner, grants, now)
        if not self._pay_step(state, now):
            return lifecycle.quota_exhausted(state, StopReason.DAILY_STEP_QUOTA_EXHAUSTED)
        context = self.context(state, grants=grants)
        summary = _context_summary(context)
        try:
            raw, tokens, details = unwrap(planner.next(state, context))
        except PlannerError as exc:
            self._refund_step(state, now)  # no step is spent
            return lifecycle.fail(state, exc.code, **failure_details(exc))
        return _Planned(raw, planner.source, summary | details, tokens, None, context.preferences)

    def _plan_waiting(
        self, state: RunState, planner: WaitingPlanner, grants: Sequence[CapabilityGrant], now: int
    ) -> _Planned | Commit | None:
        """The step split at the model call (runs.domain.gateway.calls).

        1. No call recorded for this step: pay the step, build the request from the bounded
           context and commit it with the run. The gateway sends it; this worker lets go.
        2. The call is open (queued or being sent): nothing to do; the run holds no worker.
        3. The call is settled: its recorded reply (or failure) is the step's planner output,
           and the step's commit consumes it. A worker that dies before that commit finds the
           same reply again: the model is never asked twice for one recorded reply.
        """
        step = state.step + 1
        call = self.store.model_call(state.run_id, step, state.version)
        if call is None:
            if not self._pay_step(state, now):
                return lifecycle.quota_exhausted(state, StopReason.DAILY_STEP_QUOTA_EXHAUSTED)
            context = self.context(state, grants=grants)
            try:
                request = planner.request(state, context)
            except PlannerError as exc:
                self._refund_step(state, now)
                return lifecycle.fail(state, exc.code, **failure_details(exc))
            request = dataclasses.replace(request, summary=_context_summary(context))
            return lifecycle.model_requested(state, call_id(state.run_id, step), request)
        if call.status in OPEN:
            return None
        if call.status not in SETTLED:
            # Abandoned (or taken) while the run still runs: only a bug gets here; stop, once.
            return lifecycle.fail(state, CALL_LOST, call_status=call.status.value)
        try:
            raw, tokens, details = unwrap(planner.answer(state, call))
        except PlannerError as exc:
            # The call failed for good: the step is not spent (it was paid when requested).
            if self.quota is not None and self._refunded != (state.run_id, step):
                self._refunded = (state.run_id, step)
                self.quota.give_back(state.subject, now)
            commit = lifecycle.fail(state, exc.code, **failure_details(exc))
            commit.consume_call = call.call_id
            return commit
        summary = {**call.summary, **details}
        return _Planned(raw, planner.source, summary, tokens, call.call_id)

    def _pay_step(self, state: RunState, now_ms: int) -> bool:
        """Spend one unit of the subject's daily quota on the step about to be planned; False
        if the quota is spent. Paid where steps are spent, before the planner is asked. A crash
        before the step commits costs the subject one step: the imprecision errs on the side of
        the limit."""
        key = (state.run_id, state.step + 1)
        if self.quota is None or self._paid == key:
            return True
        if not self.quota.take(state.subject, now_ms):
            return False
        self._paid = key
        return True

    def _refund_step(self, state: RunState, now_ms: int) -> None:
        if self.quota is not None and self._paid == (state.run_id, state.step + 1):
            self._paid = None
            self.quota.give_back(state.subject, now_ms)

    def context(
        self, state: RunState, *, grants: Iterable[CapabilityGrant] | None = None
    ) -> PlannerContext:
        """The bounded view the planner gets for its next step (also shown to operators)."""
        # The bounded working-memory view, each item with its trust label: never the history.
        view = self.store.working_view(state.run_id, state.step, state.version)
        observations = [i.as_dict() for i in view]
        grants = self.store.grants(state.run_id, state.version) if grants is None else grants
        capabilities = usable_capabilities(grants, step=state.step + 1)
        return PlannerContext(
            goal=state.goal,
            step=state.step,
            observations=observations,
            # Only tools some grant of the run could still allow: the rest can only be refused.
            tools=offerable((c.describe() for c in self.registry), capabilities),
            preferences=planning.given_preferences(self.context_extras, state),
        )

    def _contract(self, command: ExecutableCommand) -> ToolContract:
        registered = self.registry.get(command.tool_name, command.tool_version)
        if registered is None:  # the gate only issues commands for registered tools
            raise RuntimeError(f"command for unregistered tool {command.tool_name}")
        return registered.contract

    def _execute(self, state: RunState, command: ExecutableCommand, attempt: int = 1) -> RunState:
        """Run the command; retry a retryable failure under its retry policy, same token.
        Returns the state its settling commit made."""
        contract = self._contract(command)
        cancel = CancelSignal()
        previous: list[tuple[Span, Attributes]] = []
        delay = 0
        with self.watch(state.run_id, cancel):
            while True:
                # The tool's deadline counts from now, not from the decision: waiting for the
                # intent to commit (a busy database) must not eat the tool's own time.
                command = self._fresh(command, contract, state)
                # Each attempt its own span; a retry links to the attempt it repeats.
                with tel.tool_span(
                    self.telemetry, contract, attempt, links=previous, backoff_ms=delay
                ) as span:
                    execution = self.executor.run(command, contract, state, cancel)
                    tel.describe_execution(self.telemetry, span, execution)
                previous = [(span, {"agentconsole.link": "previous-attempt"})]
                outcome = execution.outcome
                policy = contract.retry
                if (
                    outcome.status is not OutcomeStatus.FAILED
                    or not outcome.retryable
                    or policy is None
                    or attempt >= policy.max_attempts
                    or cancel.cancelled
                ):
                    break
                delay = policy.delay_ms(attempt)
                attempt += 1
                state = self._apply_fresh(
                    state.run_id,
                    functools.partial(
                        lifecycle.retrying,
                        command=command,
                        attempt=attempt,
                        code=outcome.code,
                        delay_ms=delay,
                    ),
                )
                if cancel.wait(delay / 1000):
                    break  # cancelled during the backoff: settle with what we know
        return self._settle(state, command, contract, execution)

    def _fresh(
        self, command: ExecutableCommand, contract: ToolContract, state: RunState
    ) -> ExecutableCommand:
        return reissue(
            command,
            run_deadline_ms=state.deadline_ms,
            now_ms=self.clock.now_ms(),
            timeout_ms=contract.timeout_ms,
        )

    def _recover(self, state: RunState, command: ExecutableCommand, attempt: int) -> None:
        contract = self._contract(command)
        command = self._fresh(command, contract, state)
        cancel = CancelSignal()
        if state.status is Status.CANCELLING:
            # Cancelling: the effect is checked, but no tool starts again (seed §7, §13).
            cancel.cancel("CANCEL_REQUESTED")
        with (
            self.watch(state.run_id, cancel),
            tel.tool_span(self.telemetry, contract, attempt) as span,
        ):
            how, execution = self.executor.recover(command, contract, state, cancel)
            span.set({"agentconsole.tool.recovery": how})
            tel.describe_execution(self.telemetry, span, execution)
        self._apply_fresh(state.run_id, lambda cur: lifecycle.recovered(cur, command, how=how))
        self._settle(None, command, contract, execution, run_id=state.run_id)

    def _apply_fresh(
        self,
        run_id: str,
        build: Callable[[RunState], Commit],
        first: RunState | None = None,
    ) -> RunState:
        state = first
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                return self.store.apply(build(state or self.store.load(run_id)))
            except VersionConflict:
                state = None  # a cancel or decision landed meanwhile: rebuild on fresh state
        raise VersionConflict("run too busy to record", run_id=run_id)

    def _settle(
        self,
        state: RunState | None,
        command: ExecutableCommand,
        contract: ToolContract,
        execution: Execution,
        *,
        run_id: str = "",
        consume: str | None = None,
    ) -> RunState:
        """Record the command's outcome, going on from ``state`` (the intent's commit) when the
        store knows its inputs; a cancel or decision that landed while the tool ran makes that
        commit fail its compare-and-set, and it is built again on the run as read. ``consume``:
        the gateway's call whose outcome this is (runs.domain.tool_waits)."""
        run_id = state.run_id if state is not None else run_id
        kept = state is not None and self.store.inputs_kept(state)
        current = state if kept and state is not None else self.store.load(run_id, inputs=True)
        if current.status is Status.RUNNING and self.clock.now_ms() >= current.deadline_ms:
            # The run's deadline came while the tool ran: cancelling, then the effect decides.
            current = self._apply_fresh(run_id, lifecycle.deadline_during_tool)

        def build(cur: RunState) -> Commit:
            commit = settle(
                cur,
                command,
                execution.outcome,
                contract=contract,
                output_violation=execution.output_violation,
                verification=execution.verification,
                reconciled=execution.reconciled,
                duration_ms=execution.duration_ms,
                lookups=self.store.lookups(run_id),
            )
            commit.consume_call = consume  # the gateway's call whose outcome this is
            return commit

        return self._apply_fresh(run_id, build, first=current)
