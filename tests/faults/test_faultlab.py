"""``manage.py faultlab --json`` on the test database (issue 3: "faultlab --json reports every
experiment passed").

The command starts its own real worker (``runs.fault_lab.faultlab.worker_process``) pointed at the
database this process is connected to (``runs.fault_lab.faultlab.database_url()``), runs every
experiment and prints one JSON report. Its run-output root is a temporary folder for both processes.
"""

from __future__ import annotations

import io
import json
import subprocess

import pytest
from django.core.management import call_command

from runs.fault_lab.faultlab import EXPERIMENTS
from runs.fault_lab.faultlab_calls import EXPERIMENTS as CALL_EXPERIMENTS
from tests.support.procs import all_procs, cmdline

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def faultlab_workers() -> list[int]:
    return [p.pid for p in all_procs() if "-n faultlab-" in cmdline(p.pid)]


def test_faultlab_json_reports_every_experiment_passed(
    settings, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCONSOLE_RUN_OUTPUT_ROOT", str(tmp_path))
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = tmp_path
    before = faultlab_workers()
    out = io.StringIO()
    exit_code = 0
    try:
        call_command("faultlab", "--json", stdout=out)
    except SystemExit as exc:  # the command exits 1 when an experiment failed
        exit_code = exc.code

    report = json.loads(out.getvalue())
    assert set(report) == {"experiments", "passed", "failed"}
    names = [e.name for e in EXPERIMENTS] + list(CALL_EXPERIMENTS)
    assert [e["name"] for e in report["experiments"]] == names
    for experiment in report["experiments"]:
        assert set(experiment) == {"name", "passed", "evidence"}
        assert isinstance(experiment["passed"], bool)
        assert experiment["evidence"]["run_id"].startswith("run_")
    failed = {
        e["name"]: (e["evidence"]["status"], e["evidence"]["failed_expectations"])
        for e in report["experiments"]
        if not e["passed"]
    }
    assert failed == {}
    assert (report["passed"], report["failed"]) == (len(names), 0)
    assert exit_code == 0
    # The command stopped the worker it started.
    assert faultlab_workers() == before, subprocess.run(
        ["ps", "-ef"], capture_output=True, text=True, check=False
    ).stdout
