"""The composition root: the one place that picks concrete adapters (the tool registry,
planners, the store, the executor, the runner) and hands them to services as a ``RunsContext``.

Only entry points import this module: Celery tasks, API views, consumers, management commands
and the project package itself (tests/architecture/test_imports.py). It imports the apps; no
app imports it back, so it sits on top of every import cycle there could be.

Integrators add tools through ``settings.AGENTCONSOLE_TOOLS``: a list of dotted paths, each to
a ``ToolContract``, to a callable returning one (or a list), or to a module exposing ``TOOLS``
(a list of contracts) or ``contract()``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from agentconsole.metrics import StepTimingStore
from memory import tools as memory_tools
from memory.policies import memory_policies
from memory.selectors import preferences_for_planner
from policy.domain.contracts import ToolContract
from policy.domain.errors import RegistryError
from policy.domain.registry import ToolRegistry
from runs import tasks
from runs.context import RunsContext
from runs.domain.clock import SYSTEM_CLOCK, Clock
from runs.domain.planning import FixturePlanner, Planner, PlannerError
from runs.domain.runner import Runner
from runs.doorbell import ring_after_commit
from runs.executor import ThreadExecutor
from runs.faults import FaultingExecutor
from runs.isolation import run_isolated
from runs.leases import watch_tool
from runs.limits import step_quota
from runs.store import OrmRunStore
from runs.tools import artifacts, demo_partner, search


def _contracts_from(obj: Any, path: str) -> list[ToolContract]:
    if isinstance(obj, ToolContract):
        return [obj]
    if isinstance(obj, ModuleType):
        if hasattr(obj, "TOOLS"):
            return _contracts_from(list(obj.TOOLS), path)
        if hasattr(obj, "contract"):
            return _contracts_from(obj.contract, path)
        raise ImproperlyConfigured(f"{path}: module has neither TOOLS nor contract()")
    if isinstance(obj, list | tuple):
        out: list[ToolContract] = []
        for item in obj:
            out.extend(_contracts_from(item, path))
        return out
    if callable(obj):
        return _contracts_from(obj(), path)
    raise ImproperlyConfigured(f"{path} is not a ToolContract, a list of them or a factory")


def _import(path: str) -> Any:
    try:
        return importlib.import_module(path)
    except ImportError:
        module_path, _, attr = path.rpartition(".")
        try:
            return getattr(importlib.import_module(module_path), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ImproperlyConfigured(f"AGENTCONSOLE_TOOLS: cannot import {path!r}") from exc


def builtin_contracts() -> list[ToolContract]:
    return [search.contract(), artifacts.contract(), memory_tools.contract(memory_policies())]


def demo_contracts() -> list[ToolContract]:
    """Tools the demo needs and production must not have: only with DEBUG on."""
    return [demo_partner.contract()] if settings.DEBUG else []


def extra_contracts(paths: Iterable[str]) -> list[ToolContract]:
    out: list[ToolContract] = []
    for path in paths:
        out.extend(_contracts_from(_import(path), path))
    return out


@functools.cache
def registry() -> ToolRegistry:
    try:
        return ToolRegistry(
            builtin_contracts()
            + demo_contracts()
            + extra_contracts(getattr(settings, "AGENTCONSOLE_TOOLS", []))
        )
    except RegistryError as exc:
        raise ImproperlyConfigured(str(exc)) from exc


def planner_for(config: dict[str, Any]) -> Planner:
    kind = config.get("kind", "fixture")
    if kind == "fixture":
        return FixturePlanner(list(config.get("outputs", [])))
    raise PlannerError(f"unknown planner kind {kind!r}", code="UNKNOWN_PLANNER")


def store(lease_owner: str | None = None) -> OrmRunStore:
    # The ORM store, timing each planner step it commits for the metrics (agentconsole/metrics.py).
    return StepTimingStore(on_commit_events=ring_after_commit, lease_owner=lease_owner)


def executor(clock: Clock = SYSTEM_CLOCK) -> ThreadExecutor:
    common: dict[str, Any] = {
        "registry": registry(),
        "secrets": getattr(settings, "AGENTCONSOLE_TOOL_SECRETS", {}),
        "services": {"run_output_root": str(settings.AGENTCONSOLE_RUN_OUTPUT_ROOT)},
        # A tool thread opens its own database connection; close it when the thread ends.
        "on_thread_exit": connections.close_all,
        "clock": clock.now_ms,
    }
    if not getattr(settings, "AGENTCONSOLE_FAULTS_ENABLED", False):
        # Production: no fault layer at all (issue 9 item 6), in this process or in the child.
        return ThreadExecutor(**common, isolated_call=run_isolated)
    return FaultingExecutor(**common, isolated_call=functools.partial(run_isolated, faults=True))


def runner(lease_owner: str | None = None, clock: Clock = SYSTEM_CLOCK) -> Runner:
    return Runner(
        store=store(lease_owner),
        watch=lambda run_id, cancel: watch_tool(run_id, cancel, owner=lease_owner, clock=clock),
        registry=registry(),
        executor=executor(clock),
        planner_for=planner_for,
        clock=clock,
        context_extras=lambda state: preferences_for_planner(subject=state.subject),
        quota=step_quota(),
    )


def context() -> RunsContext:
    """What run services and selectors need, for an entry point to hand down (``ctx=``).

    Each field calls this module's function at call time, so a test that replaces one (say
    ``wiring.store``) changes what every service gets.
    """
    return RunsContext(
        store=lambda lease_owner=None: store(lease_owner),
        runner=lambda lease_owner=None, clock=SYSTEM_CLOCK: runner(lease_owner, clock),
        registry=lambda: registry(),
        executor=lambda clock=SYSTEM_CLOCK: executor(clock),
        enqueue=tasks.enqueue_advance,
    )
