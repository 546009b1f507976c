"""The Makefile's commands, as make would run them. `make bench` once failed on every machine
before running a benchmark: a comma inside ``$(call INSTALL,-e '.[dev,bench]')`` split the
argument in two, and the install line became ``uv pip install ... -e '.[dev; else .venv/bin/pip
install -e '.[dev``, which uv refused. Nothing ran that line but `make bench` itself.

Dry runs (``make -n -B``: every command printed, none executed) of each phony target: each line
parses as shell words, and each editable install names extras ``pyproject.toml`` declares;
`make bench` installs the ``bench`` extra, `make test` the ``dev`` one.
"""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="no `make` on this machine")

EDITABLE = re.compile(r"^\.(?:\[(?P<extras>[^\]]*)\])?$")


def phony_targets() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    found = re.search(r"^\.PHONY:(.*)$", text, re.MULTILINE)
    assert found, "the Makefile declares its targets .PHONY"
    return found.group(1).split()


def dry_run(target: str) -> list[str]:
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.strip()]


def installed_extras(lines: list[str]) -> list[set[str]]:
    """The extras of each ``-e .[...]`` in ``lines`` (an empty set for a plain ``-e .``)."""
    found = []
    for line in lines:
        words = shlex.split(line)  # an unclosed quote raises here
        for flag, value in itertools.pairwise(words):
            if flag != "-e":
                continue
            editable = EDITABLE.match(value.rstrip(";"))
            assert editable, f"an editable install of something else: {value!r} in {line!r}"
            extras = editable.group("extras") or ""
            found.append({name.strip() for name in extras.split(",") if name.strip()})
    return found


@pytest.mark.parametrize("target", phony_targets())
def test_each_command_of_a_target_is_well_formed(target: str) -> None:
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                   ["optional-dependencies"])  # fmt: skip
    for extras in installed_extras(dry_run(target)):
        assert extras <= declared, f"`make {target}` installs undeclared extras {extras - declared}"


def test_bench_installs_the_bench_extra_and_test_the_dev_one() -> None:
    assert {"dev", "bench"} in installed_extras(dry_run("bench"))
    assert {"dev"} in installed_extras(dry_run("test"))
