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
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from agentconsole.access.demo_passwords import refuse_demo_passwords
from agentconsole.ops import telemetry
from agentconsole.ops.metrics import StepTimingStore, observe_model_latency
from memory import tools as memory_tools
from memory.policies import memory_policies
from memory.selectors import preferences_for_planner
from notify import tasks as notify_tasks
from policy.domain.contracts import ToolContract
from policy.domain.errors import RegistryError
from policy.domain.mcp_tools.mcp import McpServerSpec
from policy.domain.registry import ToolRegistry
from policy.domain.tool_policy import ToolPolicy, ToolPolicyInvalid, parse_tool_policy, tool_facts
from policy.mcp import selectors as mcp_selectors
from runs import tasks
from runs.calls import doorbell as calls_doorbell
from runs.calls.tools import Tools as GatewayTools
from runs.context import RunsContext
from runs.domain.clock import SYSTEM_CLOCK, Clock
from runs.domain.gateway import model_planning
from runs.domain.planning import FixturePlanner, Planner, PlannerError
from runs.domain.ports import StepQuota
from runs.domain.runner import Runner
from runs.engine.doorbell import ring_after_commit
from runs.engine.executor import ThreadExecutor
from runs.engine.isolation import run_isolated
from runs.engine.leases import new_owner, watch_tool
from runs.fault_lab.faults import FaultingExecutor
from runs.orm.store import OrmRunStore
from runs.planners.openai_planner import ModelEndpoint, OpenAIPlanner
from runs.start.limits import step_quota
from runs.tools import artifacts, demo_notice, demo_partner, search

if TYPE_CHECKING:
    from runs.calls.gateway import Gateway


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
    return [demo_partner.contract(), demo_notice.contract()] if settings.DEBUG else []


def extra_contracts(paths: Iterable[str]) -> list[ToolContract]:
    out: list[ToolContract] = []
    for path in paths:
        out.extend(_contracts_from(_import(path), path))
    return out


@functools.cache
def static_contracts() -> tuple[ToolContract, ...]:
    """The tools named in code and settings: built and checked once per process."""
    try:
        contracts = (
            builtin_contracts()
            + demo_contracts()
            + extra_contracts(getattr(settings, "AGENTCONSOLE_TOOLS", []))
        )
        ToolRegistry(contracts)  # a broken contract stops the start-up (issue 9 item 15)
    except RegistryError as exc:
        raise ImproperlyConfigured(str(exc)) from exc
    return tuple(contracts)


class _Registry:
    """``registry()``: the static tools plus the MCP tools operators accepted (in the database).

    Rebuilt when the MCP catalog changes: each call reads the catalog's stamp (one aggregate
    query, ``mcp_catalog_stamp``) and reuses the registry built for that stamp. A runner takes
    one registry for a whole advance, so a step costs no extra query; an acceptance reaches the
    next advance. ``cache_clear()`` drops everything (tests that change settings)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: tuple[Any, ToolRegistry] | None = None

    def __call__(self) -> ToolRegistry:
        static = static_contracts()
        stamp = mcp_selectors.mcp_catalog_stamp()
        built = self._built
        if built is not None and built[0] == stamp:
            return built[1]
        with self._lock:
            try:
                mcp = mcp_selectors.mcp_contracts(
                    call=call_tool,
                    acall=call_tool_async,
                    allowed_commands=settings.AGENTCONSOLE_MCP_STDIO_COMMANDS,
                )
                fresh = ToolRegistry(static + tuple(mcp))
            except RegistryError as exc:
                # An MCP contract named like a static tool: the static set stands alone.
                raise ImproperlyConfigured(str(exc)) from exc
            self._built = (stamp, fresh)
        return fresh

    def cache_clear(self) -> None:
        static_contracts.cache_clear()
        with self._lock:
            self._built = None


registry = _Registry()


# The MCP client and the gateway are imported where they are used: the mcp and openai packages
# (about 50 MB resident each) stay out of processes that never call an MCP tool or a model
# (a worker that splits its steps at the model call; the web process).
def call_tool(*args: Any, **kwargs: Any) -> Any:
    from policy.mcp.client import call_tool as call  # import here: the mcp package, on use

    return call(*args, **kwargs)


async def call_tool_async(*args: Any, **kwargs: Any) -> Any:
    from policy.mcp.client import call_tool_async as call  # import here: in the gateway only

    return await call(*args, **kwargs)


def list_tools(*args: Any, **kwargs: Any) -> Any:
    from policy.mcp.client import list_tools as listing  # import here: on use

    return listing(*args, **kwargs)


def mcp_lister(spec: McpServerSpec) -> list[dict[str, Any]]:
    """Lists a server's tools for the MCP services, with the secrets from settings."""
    return list_tools(
        spec,
        secrets=settings.AGENTCONSOLE_MCP_SECRETS,
        timeout_s=settings.AGENTCONSOLE_MCP_LIST_TIMEOUT_S,
    )


@functools.cache
def tool_policy() -> ToolPolicy:
    """``settings.AGENTCONSOLE_TOOL_POLICY``, checked against the tools named in code and
    settings once: an unknown tool, key, value or argument stops the start-up (a system check
    calls this), never a policy silently ignored.

    The static tools only, not ``registry()``: system checks run before ``migrate`` (no MCP
    catalog table yet) and the policy is cached for the process, while MCP tools come and go
    with an operator's acceptance, which carries their own confirmation mode."""
    raw = getattr(settings, "AGENTCONSOLE_TOOL_POLICY", None)
    try:
        return parse_tool_policy(
            raw, tools=tool_facts(static_contracts()), where="AGENTCONSOLE_TOOL_POLICY"
        )
    except ToolPolicyInvalid as exc:
        raise ImproperlyConfigured(exc.message) from exc


def model_endpoints() -> dict[str, ModelEndpoint]:
    """The configured model endpoints (``settings.AGENTCONSOLE_MODEL_ENDPOINTS``), by name."""
    configured = getattr(settings, "AGENTCONSOLE_MODEL_ENDPOINTS", {})
    return {name: ModelEndpoint.from_settings(name, raw) for name, raw in configured.items()}


def planner_for(
    config: dict[str, Any],
    clock: Clock = SYSTEM_CLOCK,
    sleep: Callable[[float], None] = time.sleep,
) -> Planner:
    """The planner a run's stored configuration names. ``clock`` and ``sleep`` pace a model
    planner's retries (a test passes a fake pair and never waits)."""
    kind = config.get("kind", "fixture")
    if kind == "fixture":
        return FixturePlanner(list(config.get("outputs", [])))
    if kind == model_planning.PLANNER_KIND:
        endpoints = model_endpoints()
        # Checked again here, not only at creation: the deployment's endpoints may have changed
        # since the run was stored (PLANNER_ENDPOINT_UNKNOWN then stops it with that code).
        try:
            model_planning.check_config(config, endpoints=endpoints)
        except model_planning.PlannerConfigInvalid as exc:
            raise PlannerError(exc.message, code=exc.code) from None
        return OpenAIPlanner(
            endpoint=endpoints[config["endpoint"]],
            model=config.get("model"),
            clock=clock,
            sleep=sleep,
        )
    raise PlannerError(f"unknown planner kind {kind!r}", code="UNKNOWN_PLANNER")


def store(lease_owner: str | None = None) -> OrmRunStore:
    # The ORM store, timing each planner step it commits for the metrics
    # (agentconsole/ops/metrics.py).
    return StepTimingStore(
        on_commit_events=ring_after_commit,
        lease_owner=lease_owner,
        on_call_requested=calls_doorbell.ring,
        on_notification=notify_tasks.enqueue_deliver,
    )


def executor(clock: Clock = SYSTEM_CLOCK, tools: ToolRegistry | None = None) -> ThreadExecutor:
    tools = tools if tools is not None else registry()
    common: dict[str, Any] = {
        "registry": tools,
        "secrets": {
            **getattr(settings, "AGENTCONSOLE_TOOL_SECRETS", {}),
            **mcp_selectors.mcp_secrets_for(tools, settings.AGENTCONSOLE_MCP_SECRETS),
        },
        "services": {"run_output_root": str(settings.AGENTCONSOLE_RUN_OUTPUT_ROOT)},
        # A tool thread opens its own database connection; close it when the thread ends.
        "on_thread_exit": connections.close_all,
        "clock": clock.now_ms,
        "trace_headers": telemetry.from_settings().trace_headers,
    }
    if not getattr(settings, "AGENTCONSOLE_FAULTS_ENABLED", False):
        # Production: no fault layer at all (issue 9 item 6), in this process or in the child.
        return ThreadExecutor(**common, isolated_call=run_isolated)
    return FaultingExecutor(**common, isolated_call=functools.partial(run_isolated, faults=True))


def runner(
    lease_owner: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
    defer_calls: bool | None = None,
    quota: StepQuota | None = None,
) -> Runner:
    """The runner a worker advances runs with. ``defer_calls`` (default: the setting
    ``AGENTCONSOLE_MODEL_CALLS`` is "gateway") splits a model planner's step at its call;
    ``quota`` (default: the subjects' daily step quota) is what each step is paid from."""
    tools = registry()  # one registry (one catalog read) for the runner and its executor
    if defer_calls is None:
        defer_calls = settings.AGENTCONSOLE_MODEL_CALLS == "gateway"
    return Runner(
        store=store(lease_owner),
        watch=lambda run_id, cancel: watch_tool(run_id, cancel, owner=lease_owner, clock=clock),
        registry=tools,
        executor=executor(clock, tools),
        planner_for=functools.partial(planner_for, clock=clock),
        clock=clock,
        context_extras=lambda state: preferences_for_planner(subject=state.subject),
        quota=step_quota() if quota is None else quota,
        telemetry=telemetry.from_settings(),
        defer_calls=defer_calls,
    )


def gateway(clock: Clock = SYSTEM_CLOCK) -> Gateway:
    """The gateway process's loop (``manage.py gateway``): every configured endpoint, the
    workers' queue for the runs it answers, the model latency histogram. An entry point like
    the web, worker and beat: with DEBUG=0 it is not built while a demo password works."""
    from runs.calls.gateway import Gateway  # import here: openai, in the gateway process only

    refuse_demo_passwords("the gateway")
    return Gateway(
        endpoints=model_endpoints(),
        owner=new_owner(),
        send_advance=lambda run_id: tasks.enqueue_advance(run_id),
        lease=timedelta(seconds=settings.AGENTCONSOLE_GATEWAY_LEASE_S),
        poll_s=settings.AGENTCONSOLE_GATEWAY_POLL_S,
        clock=clock,
        observe=observe_model_latency,
        doorbell=calls_doorbell.listen,
        tools=gateway_tools,
    )


def gateway_tools() -> GatewayTools:
    """The gateway's tools: the registry (the MCP tools accepted now) and their secrets."""
    tools = registry()
    return GatewayTools(
        registry=tools,
        secrets=mcp_selectors.mcp_secrets_for(tools, settings.AGENTCONSOLE_MCP_SECRETS),
        max_in_flight=settings.AGENTCONSOLE_MCP_MAX_IN_FLIGHT,
    )


def context() -> RunsContext:
    """What run services and selectors need, for an entry point to hand down (``ctx=``).

    Each field calls this module's function at call time, so a test that replaces one (say
    ``wiring.store``) changes what every service gets.
    """
    return RunsContext(
        store=lambda lease_owner=None: store(lease_owner),
        runner=lambda lease_owner=None, clock=SYSTEM_CLOCK, **kw: runner(lease_owner, clock, **kw),
        registry=lambda: registry(),
        executor=lambda clock=SYSTEM_CLOCK: executor(clock),
        enqueue=tasks.enqueue_advance,
        tool_policy=lambda: tool_policy(),
        first_step_here=first_step_here,
    )


def first_step_here(planner: dict[str, Any]) -> bool:
    """A model planner's run, with the gateway making the calls: its first step only builds
    the model request and records it (runs.services.run_create takes it in the creating
    request, so the gateway can send it at once, without a worker's turn first)."""
    return (
        settings.AGENTCONSOLE_MODEL_CALLS == "gateway"
        and planner.get("kind") == model_planning.PLANNER_KIND
    )
