"""What every process of the project does with Python's collector at its start
(agentconsole/__init__.py, agentconsole/apps.py): it runs rarely while the ~1,100 modules load,
then the start's objects are frozen out of its sight and its thresholds are Python's again. A
process whose thresholds stayed at the start's would hold garbage cycles 140 times longer."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import agentconsole

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json
import agentconsole
during = gc.get_threshold()
import django
django.setup()
print(json.dumps({"during": during, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_a_process_collects_rarely_while_it_starts_and_as_python_does_after() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentconsole.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["during"][0] == agentconsole.STARTUP_GC_THRESHOLD
    assert tuple(seen["after"]) == agentconsole.DEFAULT_GC_THRESHOLDS
    # The apps' modules, models and settings: far more than a bare interpreter holds.
    assert seen["frozen"] > 50_000


def test_this_test_process_collects_as_python_does() -> None:
    """pytest-django set Django up in this process: the same end of the start."""
    assert gc.get_threshold() == agentconsole.DEFAULT_GC_THRESHOLDS
    assert agentconsole.DEFAULT_GC_THRESHOLDS[0] < agentconsole.STARTUP_GC_THRESHOLD
