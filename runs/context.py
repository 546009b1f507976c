"""What run services and selectors need from the composition root, handed down explicitly.

Services and selectors never import ``agentconsole.wiring`` (it sits on top of every app).
Entry points (Celery tasks, API views, consumers, management commands) build a ``RunsContext``
with ``wiring.context()`` and pass it as ``ctx=``. The fields are factories, not objects: a
store and a runner are per lease owner, and the tool registry is built once and cached by the
root.

``ctx`` is optional for callers that are not entry points (the scenario runner, the fault lab,
the tests): they get the context the root installed at start-up (``install``, called from
``agentconsole.apps``). That fallback is the one place a service reaches for a collaborator it
was not given; it holds whatever the root chose, and nothing here names a concrete adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from policy.domain.registry import ToolRegistry
from policy.domain.tool_policy import EMPTY, ToolPolicy
from runs.domain.runner import Runner
from runs.engine.executor import ThreadExecutor
from runs.orm.store import OrmRunStore


class Enqueue(Protocol):
    def __call__(
        self, run_id: str, *, queue: str | None = None, handed_back: str | None = None
    ) -> None: ...


@dataclass(frozen=True)
class RunsContext:
    # store(lease_owner=None): the run store; with an owner, every write also checks the lease.
    store: Callable[..., OrmRunStore]
    # runner(lease_owner=None, clock=system, quota=the daily step quota): the runner loop
    # around the store, registry, executor and planner.
    runner: Callable[..., Runner]
    registry: Callable[[], ToolRegistry]
    # executor(clock=system): the tool executor (deadlines read from the clock).
    executor: Callable[..., ThreadExecutor]
    # Sends the Celery message that advances a run (runs.tasks owns the task).
    enqueue: Enqueue
    # The deployment's tool policy (settings.AGENTCONSOLE_TOOL_POLICY, checked at start-up).
    tool_policy: Callable[[], ToolPolicy] = field(default=lambda: EMPTY)
    # first_step_here(planner configuration): whether the request that creates a run takes
    # its first step itself (runs.services.run_create). True only where that step can do no
    # more than record a model request for the gateway: the planner waits on a model and the
    # runner splits its step at the call. Never for a planner that would answer, or run a
    # tool, in the creating request.
    first_step_here: Callable[[dict[str, Any]], bool] = field(default=lambda planner: False)


_provider: Callable[[], RunsContext] | None = None


def install(provider: Callable[[], RunsContext]) -> None:
    """The composition root names the default context (once, at start-up)."""
    global _provider
    _provider = provider


def resolve(ctx: RunsContext | None) -> RunsContext:
    """``ctx`` when given; else the root's default (see the module docstring)."""
    if ctx is not None:
        return ctx
    if _provider is None:
        raise ImproperlyConfigured("no RunsContext: agentconsole.apps installs the default")
    return _provider()
