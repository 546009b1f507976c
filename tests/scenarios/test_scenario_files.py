"""Every scenario file shipped in runs/fixtures/scenarios is a documented, valid scenario."""

from __future__ import annotations

import json

import pytest

from runs.start.scenarios import parse_scenario
from tests.support.runs import SCENARIO_DIR

FILES = sorted(SCENARIO_DIR.glob("*.json"))


def test_the_scenario_folder_is_not_empty():
    names = {p.stem for p in FILES}
    assert "seed-walkthrough" in names
    assert len(FILES) > 1


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_file_is_valid_and_documented(path):
    text = path.read_bytes()
    scenario = parse_scenario(text)
    assert scenario.name == path.stem
    assert len(scenario.description) >= 40
    assert scenario.planner, "a scenario without planner outputs tests nothing"
    # Plain JSON: no NaN/Infinity, which Python's json module would accept.
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{path.name}: {c} is not JSON"))
