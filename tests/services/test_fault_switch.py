"""issue 9 item 6: fault injection exists only where ``AGENTCONSOLE_FAULTS_ENABLED`` says so
(the fault lab and the tests); a deployment that serves users runs the plain executor."""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentconsole import wiring
from runs import services
from runs.domain.machine import Status
from runs.engine.executor import ThreadExecutor
from runs.engine.isolation import run_isolated
from runs.fault_lab import fault_switch, faults
from runs.fault_lab.faults import FaultingExecutor
from runs.models import Run
from tests.services.services_kit import create_run, search
from tests.support.runs import bare_run

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = {"tools": {"search_public": {"mode": "fail"}}}


def test_off_by_default_the_executor_is_the_plain_one(settings):
    """issue 9 item 6: off, no fault layer in this process nor in an isolated child."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = False
    plain = wiring.executor()
    assert type(plain) is ThreadExecutor
    assert plain.isolated_call is run_isolated  # the child is told faults=False

    settings.AGENTCONSOLE_FAULTS_ENABLED = True
    faulting = wiring.executor()
    assert type(faulting) is FaultingExecutor
    assert isinstance(faulting.isolated_call, functools.partial)
    assert faulting.isolated_call.keywords == {"faults": True}


def _advance_queries(settings, enabled: bool) -> list[str]:
    settings.AGENTCONSOLE_FAULTS_ENABLED = enabled
    state = create_run([search("p1", "retry"), search("p2", "quarantine")])
    with CaptureQueriesContext(connection) as queries:
        done = services.run_advance(run_id=state.run_id)
    assert done.tool_calls == 2
    return [q["sql"] for q in queries.captured_queries]


def test_off_a_tool_call_costs_no_fault_lookup(settings):
    """issue 9 item 6: the fault layer's query per tool call (plan_for) is gone when off."""
    off = _advance_queries(settings, enabled=False)
    on = _advance_queries(settings, enabled=True)

    def fault_lookups(sqls: list[str]) -> int:
        # plan_for: the run's fault plan alone (store.load reads whole rows, faults included).
        return sum(
            1 for sql in sqls if sql.startswith('SELECT "runs_run"."faults" AS "faults" FROM')
        )

    assert fault_lookups(off) == 0
    assert fault_lookups(on) == 2  # one per tool call
    assert len(on) - len(off) == 2


def test_off_a_run_with_a_fault_plan_is_refused_at_creation(settings):
    """issue 9 item 6: a plan that would silently do nothing is refused: FAULTS_DISABLED."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = False
    with pytest.raises(fault_switch.FaultsDisabled) as raised:
        bare_run(faults=PLAN)
    assert raised.value.code == "FAULTS_DISABLED"
    assert Run.objects.count() == 0

    settings.AGENTCONSOLE_FAULTS_ENABLED = True
    state = bare_run(faults=PLAN)
    assert state.status is Status.CREATED


def test_off_a_scenario_file_with_faults_is_refused_by_run_fixture(settings, tmp_path):
    """issue 9 item 6: the scenario path (run_fixture) refuses it with the same code."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = False
    path = tmp_path / "faulty.json"
    path.write_text(
        json.dumps({"subject": "alice", "goal": "g", "planner": [], "faults": PLAN}),
        encoding="utf-8",
    )
    with pytest.raises(CommandError, match=r"^FAULTS_DISABLED: "):
        call_command("run_fixture", str(path), "--json", stdout=io.StringIO())
    assert Run.objects.count() == 0


def test_off_the_fault_lab_refuses_to_start(settings):
    """issue 9 item 6: no fault lab on a deployment with fault injection off."""
    settings.AGENTCONSOLE_FAULTS_ENABLED = False
    with pytest.raises(CommandError, match=r"^FAULTS_DISABLED: "):
        call_command("faultlab", "--json", stdout=io.StringIO())


def test_off_the_crash_code_is_unreachable_even_with_its_environment_variable():
    """issue 9 item 6: the SIGKILL needs the fault switch too, not only the variable. In a child
    process with a production environment (the switch unset): were the crash reachable, the
    child would die of SIGKILL instead of answering."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTCONSOLE_FAULTS_ENABLED"}
    env.update({faults.CRASH_ENV: "1", "DJANGO_SETTINGS_MODULE": "agentconsole.settings"})
    code = (
        "import django; django.setup(); from runs.fault_lab import faults; "
        "print(faults._die('before_tool').code)"
    )
    done = subprocess.run(  # our interpreter, fixed code, no shell
        [sys.executable, "-c", code],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "CRASH_FAULT_NOT_ALLOWED"
