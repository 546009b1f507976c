"""Run services: every write to a run goes through here (STYLE habit 7).

``run_create``, ``run_advance``, ``confirmation_decide``, ``run_cancel``. Adapters (API views,
Celery tasks, management commands) call these and nothing below them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any

from django.db import transaction

from agentconsole.kernel.roles import actor_name, user_or_none
from policy import services as policy_services
from policy.approvers import approver_facts
from policy.domain.confirmation.approvers import approver_rule, may_approve, may_decline
from policy.domain.errors import DomainError, NotFound
from policy.domain.registry import ToolRegistry
from policy.domain.secrets.redaction import redact_secrets
from policy.domain.tool_policy import EMPTY, ToolPolicy, effective_policy, tool_facts
from policy.services import PendingConfirmation
from runs.context import RunsContext, resolve
from runs.domain import lifecycle
from runs.domain import trace as ev
from runs.domain.budgets import RunBudgets, StepsOwed
from runs.domain.clock import SYSTEM_CLOCK, Clock
from runs.domain.errors import LeaseLost, VersionConflict
from runs.domain.machine import Status
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.engine.leases import lease_acquire, lease_hand_back, lease_release, new_owner
from runs.fault_lab.fault_switch import require_faults_enabled
from runs.models import Run
from runs.privacy import erasure
from runs.start.binding import bind_confirmations, bound_grants
from runs.start.limits import RunLimits, admit_subject, check_budgets, check_create_rate

log = logging.getLogger(__name__)


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex}"


def run_create(
    *,
    subject: str,
    goal: str,
    budgets: RunBudgets,
    grants: Sequence[dict[str, Any]],
    planner: dict[str, Any],
    confirmations: Sequence[dict[str, Any]] = (),
    owner: Any = None,
    granted_by: Any = None,
    now_ms: int | None = None,
    enqueue: bool = False,
    faults: dict[str, Any] | None = None,
    queue: str | None = None,
    limits: RunLimits | None = None,
    ctx: RunsContext | None = None,
    clock: Clock = SYSTEM_CLOCK,
    profile_policy: ToolPolicy = EMPTY,
    profile: Any = None,
) -> RunState:
    """Create a run with trusted grants bound to its new id. Grants come from the caller (an
    operator, a scenario file), never from a planner output. Scenario confirmations are bound
    to the hash of the proposal they name. The run records its effective tool policy now: the
    deployment's joined with ``profile_policy`` (its profile's, already checked to only
    tighten), so a later edit of either changes no run; and the ``profile`` it came from."""
    # Secrets in the goal and the planner configuration are masked before anything is stored
    # (issue 9 item 12), except a fixture planner's scripted outputs: they are the planner's
    # proposals, and a tool runs what was proposed (issue 21 item 1); only the runner reads
    # them back. Scenario confirmations are hashed over the real arguments, as the gate hashes
    # the proposals they answer, and stored masked.
    goal, planner = redact_secrets(goal), _planner_stored(planner)
    if faults:
        require_faults_enabled()  # FAULTS_DISABLED: a plan here would silently do nothing
    run_id = new_run_id()
    now = clock.now_ms() if now_ms is None else now_ms
    # The subject's limits (runs.start.limits; from settings unless given) are checked here, so the
    # API, the scenario runner and the commands share them.
    limits = RunLimits.from_settings() if limits is None else limits
    check_budgets(budgets, limits)
    # The creation rate of the person asking, before anything is written; every door that
    # starts a run for a person comes through here (issue 21 item 7).
    check_create_rate(owner=owner, limits=limits)
    context = resolve(ctx)
    state = RunState(
        run_id=run_id,
        subject=subject,
        goal=goal,
        tool_policy=_effective_policy(context, profile_policy),
        max_steps=budgets.max_steps,
        max_tool_calls=budgets.max_tool_calls,
        max_repeated_proposal=budgets.max_repeated_proposal,
        deadline_ms=now + budgets.deadline_ms,
        max_tokens=budgets.max_tokens,
    )
    bound = bound_grants(run_id, grants)
    bound_confirmations, proposals = bind_confirmations(run_id, confirmations)
    store = context.store()
    owed = StepsOwed()  # the first step's, paid last, under the subject's lock
    with transaction.atomic():
        store.create(
            state,
            grants=bound,
            confirmations=bound_confirmations,
            planner=planner,
            owner=owner,
            budgets=budgets.model_dump(),
            granted_by=granted_by,
            proposals=proposals,
            faults=faults,
            profile=profile,
        )
        state = store.apply(_created_commit(state, grants=len(bound), planner=planner))
        if enqueue and context.first_step_here(planner):
            state = _first_step(state, context, clock, owed)
        admit_subject(subject=subject, limits=limits, now_ms=now, run_id=run_id, owed=owed)
        if enqueue and state.status is Status.CREATED:
            _enqueue_on_commit(run_id, queue)
    return state


def _first_step(state: RunState, context: RunsContext, clock: Clock, owed: StepsOwed) -> RunState:
    """The run's first step, in the transaction that creates it; the state it leaves.

    For a run whose planner waits on a model (``RunsContext.first_step_here``), that step
    starts the run and records its first model request, which the gateway sends once the
    creation commits: a worker is first needed when the reply is recorded. Before, a worker's
    turn (a message, a lease, a load, two commits) came first, and a burst of creates waited
    in the workers' queue before any model was asked (the runs-in-flight bench).

    No lease: nobody else can see the run before this transaction commits. A worker's runner
    takes the step; it is paid last (``owed``, ``admit_subject``). In a savepoint: a step that
    fails here leaves the created run, and a worker takes it (the caller sends the message).
    """
    try:
        with transaction.atomic():
            return context.runner(None, clock, quota=owed).advance(state.run_id)
    except Exception:  # the worker's turn instead; the created run stays
        owed.steps = 0  # undone with the savepoint: the worker pays its own
        log.exception("run %s: FIRST_STEP_DEFERRED: a worker takes its first step", state.run_id)
        return state


def _effective_policy(context: RunsContext, profile: ToolPolicy) -> dict[str, Any]:
    deployment = context.tool_policy()
    if not deployment and not profile:
        return {}
    facts = tool_facts(context.registry())
    return effective_policy(deployment, profile, tools=facts).data()


def _planner_stored(planner: dict[str, Any]) -> dict[str, Any]:
    stored = redact_secrets(planner)
    if "outputs" in planner:
        stored = {**stored, "outputs": planner["outputs"]}
    return stored


def _created_commit(state: RunState, *, grants: int, planner: dict[str, Any]) -> Commit:
    """The run's first trace event, through the same compare-and-set as every later write."""
    created = Commit(expected_version=state.version, state=state.model_copy(deep=True))
    created.events.append(
        ev.TraceDraft(
            ev.RUN_CREATED, None, {"grants": grants, "planner": planner.get("kind", "fixture")}
        )
    )
    created.state.version += 1
    return created


def _enqueue_on_commit(run_id: str, queue: str | None = None) -> None:
    # Tasks take ids only and are enqueued after commit, so a worker never sees a missing run.
    transaction.on_commit(lambda: enqueue_advance(run_id, queue=queue))


def enqueue_advance(
    run_id: str, *, queue: str | None = None, handed_back: str | None = None
) -> None:
    """Ask a worker to advance the run: the root's ``enqueue`` (runs.tasks.enqueue_advance).

    Takes no context: every enqueue of this module goes through this one function (tests
    replace it to record what would be sent), and there is one Celery app per process.
    """
    resolve(None).enqueue(run_id, queue=queue, handed_back=handed_back)


def run_state(*, run_id: str, ctx: RunsContext | None = None) -> RunState:
    return resolve(ctx).store().load(run_id)


def run_advance(
    *,
    run_id: str,
    slice_steps: int = 0,
    queue: str | None = None,
    handed_back: str | None = None,
    ctx: RunsContext | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> RunState | None:
    """Advance a run until it waits, stops or ends, holding its lease; None if another worker
    holds it (that worker advances it; this one leaves it alone).

    With ``slice_steps`` (the worker's fairness slice), stop after that many planner steps and
    hand the still-running run back to the end of ``queue``, so that one subject's long runs
    cannot hold every worker while another subject's run waits. The lease is released before
    the new message is sent, and names that message (``handed_back``; see
    ``runs.engine.leases.lease_acquire``): the task that takes it finds the lease free, and a
    duplicate of an older turn drops out. A crash between the two leaves a running run with an
    expired lease and no message: the sweeper requeues it once it is stale, so a hand-back
    never loses a run; the lease keeps two tasks for one run from advancing it at once.

    Slicing is per run: a subject with k runs queued gets k turns for another subject's one.
    That share is bounded by the active-runs limit (``runs.start.limits``), not by this function.
    """
    owner = new_owner()
    if not lease_acquire(run_id=run_id, owner=owner, handed_back=handed_back, clock=clock):
        if not Run.objects.filter(pk=run_id).exists():
            raise NotFound(f"no run {run_id}", run_id=run_id)
        return None
    next_message = None
    try:
        runner = resolve(ctx).runner(owner, clock=clock)
        state = runner.advance(run_id, slice_steps=slice_steps)
        # Still running: its slice ended (back to the queue), or it waits on its model call
        # (the gateway sends it back once the reply is recorded: no message from here).
        if runner.sliced and state.status is Status.RUNNING:
            next_message = lease_hand_back(run_id=run_id, owner=owner, clock=clock)
    except LeaseLost:
        return None
    finally:
        if next_message is None:
            lease_release(run_id=run_id, owner=owner)
    if next_message is not None:
        transaction.on_commit(
            lambda: enqueue_advance(run_id, queue=queue, handed_back=next_message)
        )
    return state


DECIDE_ATTEMPTS = 3  # a decision that lost a compare-and-set looks again, this many times
REASON_REQUIRED = "REASON_REQUIRED"


def confirmation_decide(
    *,
    confirmation_id: str,
    approved: bool,
    shown_hash: str,
    by: Any = None,
    reason: str = "",
    enqueue: bool = False,
    ctx: RunsContext | None = None,
    run_id: str | None = None,
) -> RunState:
    """A person approves or declines the pending confirmation they were shown. Takes the run's
    row lock (of ``run_id`` when the caller already read the confirmation's run; otherwise the
    confirmation is read first to find it).

    1. ``shown_hash`` is the proposal hash the person saw: if the pending proposal changed since,
       the decision is refused (a stale click can never approve a different proposal).
    2. The confirmation's approver rule (policy.domain.confirmation.approvers) says whether this
       person may decide it (APPROVER_NOT_ALLOWED, ALREADY_APPROVED_BY_YOU). ``by`` that is not a
       user (a scenario file replayed: trusted input, like the confirmations a run is created with)
       decides as one approver always did.
    3. An approval that is not the last one needed (the first of four eyes) is recorded and the
       run keeps waiting; the last one (or a decline) is the run's transition, as before.
    ``reason`` (what the person wrote) goes into the trace event and onto the confirmation.

    Two people deciding at once are served one after the other: each takes the run's row lock
    (PostgreSQL) and then reads the confirmation and its approvals again, so the second sees
    the first one's approval or decision. The run row, not the confirmation's: every commit of
    the run (a step, the deadline sweeper expiring this confirmation) writes the run row first,
    and a lock taken in another order could deadlock with them. Where there are no row locks
    (SQLite) the run's compare-and-set lets one commit and the other looks again; a loser whose
    item was decided meanwhile is told by whom (CONFIRMATION_NOT_PENDING).
    """
    reason = redact_secrets(reason.strip())
    if not approved and not reason and user_or_none(by) is not None:
        # One rule for the console and the API: a person who declines says why (it reaches
        # the run's owner and the trace). A scenario file replayed declines as written.
        raise DomainError("Say why you decline it.", code=REASON_REQUIRED)
    ctx = resolve(ctx)
    registry = ctx.registry

    def answer(row: PendingConfirmation, state: RunState, owner_id: Any) -> Commit:
        return _decision_commit(
            row,
            state,
            run_owner_id=owner_id,
            approved=approved,
            by=by,
            reason=reason,
            registry=registry,
        )

    return answer_pending(
        confirmation_id=confirmation_id,
        shown_hash=shown_hash,
        by=by,
        answer=answer,
        enqueue=enqueue,
        ctx=ctx,
        run_id=run_id,
        approvals=True,
    )


Answer = Callable[[PendingConfirmation, RunState, Any], Commit]


def answer_pending(
    *,
    confirmation_id: str,
    shown_hash: str,
    by: Any,
    answer: Answer,
    enqueue: bool,
    ctx: RunsContext,
    run_id: str | None = None,
    approvals: bool = False,
) -> RunState:
    """Commit a person's answer to the pending confirmation they were shown (a decision, an
    edit, a response): ``answer(row, state, run_owner_id)`` builds the commit under the run's
    row lock, from the confirmation and the run as they are now. Takes the run's row lock (see
    ``confirmation_decide`` for the order and the SQLite fallback); a run that no longer waits
    on this confirmation is refused with who answered it, and nothing is written."""
    store = ctx.store()
    for _ in range(DECIDE_ATTEMPTS):
        try:
            with transaction.atomic():
                locked = run_id
                if locked is None:
                    locked = policy_services.confirmation_for_decision(
                        confirmation_id=confirmation_id, shown_hash=shown_hash
                    ).run_id
                owner_id = _lock_run(locked)
                # Read (again) under the lock: what an earlier holder wrote is visible now.
                row = policy_services.confirmation_for_decision(
                    confirmation_id=confirmation_id, shown_hash=shown_hash, approvals=approvals
                )
                if row.run_id != locked:
                    raise NotFound("no such confirmation", confirmation_id=confirmation_id)
                state = store.load(row.run_id)
                if (
                    state.status is not Status.WAITING_CONFIRMATION
                    or state.pending_confirmation_id != row.confirmation_id
                ):
                    raise policy_services.confirmation_refusal(confirmation_id=row.confirmation_id)
                state = store.apply(answer(row, state, owner_id), decided_by=user_or_none(by))
                if enqueue and state.status is not Status.WAITING_CONFIRMATION:
                    _enqueue_on_commit(state.run_id)
            return state
        except VersionConflict:
            # Lost the race: another decision or approval committed first (its compare-and-set
            # on the run matched, ours matched nothing). Look again at what it wrote.
            continue
    raise policy_services.confirmation_refusal(confirmation_id=confirmation_id)


def _lock_run(run_id: str) -> Any:
    """Take the run's row lock (in the caller's transaction); the run's owner id."""
    return Run.objects.select_for_update().filter(pk=run_id).values_list("owner_id", flat=True)[0]


def _decision_commit(
    row: PendingConfirmation,
    state: RunState,
    *,
    run_owner_id: Any,
    approved: bool,
    by: Any,
    reason: str,
    registry: Callable[[], ToolRegistry],
) -> Commit:
    """The commit of this person's answer, after the approver rule allowed it."""
    rule = approver_rule(row.approvers)
    recorded = row.approvals
    completes, independent = True, False
    if getattr(by, "pk", None) is not None:
        person = approver_facts(by, run_owner_id=run_owner_id, run_subject=state.subject)
        priors = [a.prior for a in recorded]
        verdict = may_approve(rule, person, priors) if approved else may_decline(rule, person)
        verdict.raise_if_refused()
        completes, independent = verdict.completes, person.independent
    earlier = [(a.username, a.reason) for a in recorded]
    if approved and not completes:
        return lifecycle.record_approval(
            state,
            confirmation_id=row.confirmation_id,
            by=actor_name(by),
            reason=reason,
            rule=rule,
            earlier=earlier,
            independent=independent,
        )
    return lifecycle.decide_confirmation(
        state,
        confirmation_id=row.confirmation_id,
        approved=approved,
        by=actor_name(by),
        reason=reason,
        rule=rule,
        earlier=earlier,
        independent=independent,
        # Read only for a decline (the registry's freshness check costs a query): a declined
        # write counts as rejected; an approved one is counted when it is settled.
        contract=None if approved else registry().contract(row.tool_name, row.tool_version),
    )


def run_cancel(
    *,
    run_id: str,
    by: Any = None,
    reason: str = "",
    enqueue: bool = False,
    ctx: RunsContext | None = None,
) -> RunState:
    """Cancel a run: new tools stop at once; ``cancelled`` only once no tool is active."""
    store = resolve(ctx).store()
    for _ in range(10):
        state = store.load(run_id)
        if state.status in (Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.CANCELLING):
            return state
        commit = lifecycle.request_cancel(
            state, by=actor_name(by), reason=reason, active_tool=store.active_tool(run_id)
        )
        try:
            with transaction.atomic():
                state = store.apply(commit)
                if enqueue and state.status is Status.CANCELLING:
                    _enqueue_on_commit(run_id)
            return state
        except DomainError:
            continue  # the run moved while we decided; decide again on the fresh state
    raise DomainError("run is too busy to cancel; try again", code="RUN_BUSY")


def run_values_erase(
    *, subject: str, values: Collection[str], by: str, ctx: RunsContext | None = None
) -> int:
    """The runs side of a memory erase (runs.privacy.erasure); needs the caller's transaction."""
    return erasure.run_values_erase(
        subject=subject, values=values, by=by, store=resolve(ctx).store()
    )
